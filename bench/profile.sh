#!/usr/bin/env bash
# Where rotor's HTTP/1.1 reverse proxy spends its CPU: wrk against rotor
# (one core, GOMAXPROCS=1, three local backends on the other core) with
# `rotor serve --cpu-profile`, then the profile's top functions, flat and
# cumulative, and the share of time in each layer.
# Needs: wrk, taskset.
# Usage: bash bench/profile.sh > bench/out/profile.txt
#   (the profile stays in bench/out/profile/cpu.pprof for go tool pprof)
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk taskset; do
	command -v "$tool" >/dev/null || { echo "bench/profile.sh needs $tool" >&2; exit 1; }
done
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
. bench/setup.sh
setup profile

taskset -c 1 "$out/upstream" 127.0.0.1:19201 127.0.0.1:19202 127.0.0.1:19203 & pids+=($!)
cat > "$out/rotor.yaml" <<YAML
admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:18200", pool: app}]
pools:
  - name: app
    policy: round_robin
    endpoints:
      - {name: a, url: "http://127.0.0.1:19201"}
      - {name: b, url: "http://127.0.0.1:19202"}
      - {name: c, url: "http://127.0.0.1:19203"}
YAML
GOMAXPROCS=1 taskset -c 0 "$out/rotor" serve --config "$out/rotor.yaml" --cpu-profile "$out/cpu.pprof" 2>"$out/rotor.log" &
rotor=$!
pids+=($rotor)
for port in 19201 18200; do
	for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
done

echo "# wrk -t1 -c$CONNS -d$DURATION through rotor (one core), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
taskset -c 1 wrk -t1 -c"$CONNS" -d"$DURATION" --latency http://127.0.0.1:18200/ | grep -E 'Requests/sec|99%'
kill -TERM "$rotor"
wait "$rotor" || true

echo
echo "# top 25 by flat time"
go tool pprof -top -nodecount=25 "$out/rotor" "$out/cpu.pprof" 2>/dev/null | sed -n '/flat%/,$p'
echo
echo "# share of the samples under each layer (cumulative)"
go tool pprof -top -cum -nodecount=400 "$out/rotor" "$out/cpu.pprof" 2>/dev/null |
	awk '$6 ~ /^(net\/http\.\(\*conn\)\.serve|net\/http\.\(\*persistConn\)\.(readLoop|writeLoop)|net\/http\/httputil\.\(\*ReverseProxy\)\.ServeHTTP|net\/http\.\(\*Transport\)\.roundTrip|github\.com\/rotor-lb\/rotor\/proxy\/reverse\..*ServeHTTP|github\.com\/rotor-lb\/rotor\/server\..*|runtime\.(gcBgMarkWorker|mallocgc|findRunnable|netpoll)|syscall\.Syscall.*|internal\/poll\.\(\*FD\)\.(Read|Write))$/ {print $5, $6}' | head -30
