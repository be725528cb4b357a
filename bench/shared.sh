#!/usr/bin/env bash
# Requests/s through one rotor with its state in memory and in Redis,
# side by side in one run (alternating, three rounds each), and the Redis
# operations each request cost, read from /status.
# rotor gets one core (taskset -c 0, GOMAXPROCS=1); wrk, the backends and
# redis-server share the other.
# Needs: wrk, redis-server, taskset (Debian: wrk redis-server util-linux).
# Usage: bash bench/shared.sh > bench/out/shared.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk redis-server taskset curl
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
setup shared


taskset -c 1 "$out/upstream" 127.0.0.1:19201 127.0.0.1:19202 127.0.0.1:19203 & pids+=($!)
start_redis 1 19279

for store in memory redis; do
	state=""
	if [ "$store" = redis ]; then state='state: {store: redis, address: "127.0.0.1:19279", prefix: "bench:"}'; fi
	port=$([ "$store" = memory ] && echo 18200 || echo 18201)
	admin=$([ "$store" = memory ] && echo 18210 || echo 18211)
	cat > "$out/$store.yaml" <<YAML
admin: {listen: "127.0.0.1:$admin"}
$state
listeners: [{name: web, kind: http, listen: "127.0.0.1:$port", pool: app}]
pools:
  - name: app
    policy: p2c
    endpoints:
      - {name: a, url: "http://127.0.0.1:19201"}
      - {name: b, url: "http://127.0.0.1:19202"}
      - {name: c, url: "http://127.0.0.1:19203"}
YAML
	GOMAXPROCS=1 taskset -c 0 "$out/rotor" serve --config "$out/$store.yaml" 2>"$out/$store.log" & pids+=($!)
done
sleep 1

echo "# rotor, state in memory and in Redis: wrk -t1 -c$CONNS -d$DURATION, one core each, alternating"
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go version | cut -d' ' -f3)"
for round in 1 2 3; do
	for store in memory redis; do
		port=$([ "$store" = memory ] && echo 18200 || echo 18201)
		rps=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"$DURATION" --latency "http://127.0.0.1:$port/" | awk '/Requests\/sec/ {print $2} / 99%/ {p99=$2} END {print p99}' | paste -sd' ')
		echo "round $round  $store  req/s p99: $rps"
	done
done
echo
echo "# Redis operations per request (from /status of the redis instance)"
status=$(curl -s http://127.0.0.1:18211/status)
echo "$status" | python3 -c '
import json, sys
d = json.load(sys.stdin)
ops = d["state"]["operations"]
reqs = sum(e["requests"] for p in d["pools"] for e in p["endpoints"])
print("requests", reqs, "dropped outcomes", d["state"].get("dropped_outcomes", 0))
for k in sorted(ops):
    print(f"{k:15} {ops[k]:>10}  {ops[k]/reqs:.4f} per request")
cmds = sum(ops.get(k, 0) for k in ("outcome_script", "read", "claim", "touch"))
label = "commands"
print(f"{label:15} {cmds:>10}  {cmds/reqs:.4f} per request (outcome scripts, reads, claims, touches)")
'
