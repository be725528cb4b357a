#!/usr/bin/env bash
# rotor with GOMAXPROCS=1 against GOMAXPROCS=2 on a two-core machine whose
# cores it shares with the load and the backends (as peers.sh's CORES=2
# run has it): wrk -t2 -c50 through each, ROUNDS rounds taking turns, the
# requests/s, p99 and each rotor's CPU time a request (from /proc).
# Needs: wrk, taskset.
# Usage: bash bench/gomaxprocs.sh > bench/out/gomaxprocs.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk taskset
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
setup gomaxprocs
taskset -c 0,1 "$out/upstream" 127.0.0.1:19601 127.0.0.1:19602 127.0.0.1:19603 & pids+=($!)
declare -A pid port=([1]=18601 [2]=18602)
for g in 1 2; do
	web_config "$out/rotor$g.yaml" "127.0.0.1:${port[$g]}" 19601 19602 19603 ""
	GOMAXPROCS=$g taskset -c 0,1 "$out/rotor" serve --config "$out/rotor$g.yaml" 2>"$out/rotor$g.log" &
	pid[$g]=$!
	pids+=($!)
done
for g in 1 2; do
	for _ in $(seq 50); do curl -sf "http://127.0.0.1:${port[$g]}/" >/dev/null && break; sleep 0.1; done
done
hz=$(getconf CLK_TCK)
echo "# rotor, GOMAXPROCS=1 and 2, cores 0,1 shared with wrk -t2 -c50 -d${DURATION}s and the backends; $(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf '%-12s %6s %12s %8s %12s\n' GOMAXPROCS round requests/s "p99 ms" "CPU us/req"
for round in $(seq "$ROUNDS"); do
	order="1 2"
	[ $((round % 2)) = 0 ] && order="2 1"
	for g in $order; do
		before=$(cpu_ticks "${pid[$g]}")
		read -r p99 rps < <(taskset -c 0,1 wrk -t2 -c50 -d"${DURATION}s" --latency "http://127.0.0.1:${port[$g]}/" |
			awk '/ 99%/ {p = $2; sub(/ms/, "", p)} /Requests\/sec/ {r = $2} END {print p, r}')
		after=$(cpu_ticks "${pid[$g]}")
		awk -v g="$g" -v round="$round" -v rps="$rps" -v p99="$p99" -v t=$((after - before)) -v hz="$hz" -v d="$DURATION" \
			'BEGIN {printf "%-12s %6d %12.0f %8s %12.1f\n", g, round, rps, p99, t / hz * 1e6 / (rps * d)}'
	done
done
