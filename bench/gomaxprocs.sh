#!/usr/bin/env bash
# rotor with GOMAXPROCS=1 against GOMAXPROCS=2 on a two-core machine whose
# cores it shares with the load and the backends (as peers.sh's CORES=2
# run has it), ROUNDS rounds taking turns: wrk -t2 -c50 through each http
# listener (requests/s, p99), and redis-benchmark -c 50 SET and GET, plain
# and pipelined -P 16, through each tcp listener (one relay loop a P);
# each rotor's CPU time a request from /proc. TESTS picks "http", "tcp"
# or both (the default).
# Needs: wrk, taskset (http); redis-server, redis-benchmark (tcp).
# Usage: bash bench/gomaxprocs.sh > bench/out/gomaxprocs.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
REQUESTS=${REQUESTS:-200000}
TESTS=${TESTS:-http tcp}
want() { [[ " $TESTS " == *" $1 "* ]]; }
needs taskset
want http && needs wrk
want tcp && needs redis-server redis-benchmark
setup gomaxprocs
taskset -c 0,1 "$out/upstream" 127.0.0.1:19601 127.0.0.1:19602 127.0.0.1:19603 & pids+=($!)
if want tcp; then start_redis 0,1 19679; fi
declare -A pid port=([1]=18601 [2]=18602) tcpport=([1]=18611 [2]=18612)
for g in 1 2; do
	web_config "$out/rotor$g.yaml" "127.0.0.1:${port[$g]}" 19601 19602 19603 ""
	sed -i "s|^listeners: \[\(.*\)\]$|listeners: [\1, {name: redis, kind: tcp, listen: \"127.0.0.1:${tcpport[$g]}\", pool: redis}]|" "$out/rotor$g.yaml"
	echo '  - {name: redis, endpoints: [{name: r, address: "127.0.0.1:19679"}]}' >> "$out/rotor$g.yaml"
	GOMAXPROCS=$g taskset -c 0,1 "$out/rotor" serve --config "$out/rotor$g.yaml" 2>"$out/rotor$g.log" &
	pid[$g]=$!
	pids+=($!)
done
for g in 1 2; do
	for _ in $(seq 50); do curl -sf "http://127.0.0.1:${port[$g]}/" >/dev/null && break; sleep 0.1; done
done
hz=$(getconf CLK_TCK)
# cpu_us G BEFORE N: rotor G's CPU time since BEFORE (ticks), a request of N.
cpu_us() { awk -v t=$(($(cpu_ticks "${pid[$1]}") - $2)) -v hz="$hz" -v n="$3" 'BEGIN {printf "%.1f", t / hz * 1e6 / n}'; }

if want http; then
	echo "# rotor, GOMAXPROCS=1 and 2, cores 0,1 shared with wrk -t2 -c50 -d${DURATION}s and the backends; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	printf '%-12s %6s %12s %8s %12s\n' GOMAXPROCS round requests/s "p99 ms" "CPU us/req"
	for round in $(seq "$ROUNDS"); do
		order="1 2"
		[ $((round % 2)) = 0 ] && order="2 1"
		for g in $order; do
			before=$(cpu_ticks "${pid[$g]}")
			read -r p99 rps < <(taskset -c 0,1 wrk -t2 -c50 -d"${DURATION}s" --latency "http://127.0.0.1:${port[$g]}/" |
				awk '/ 99%/ {p = $2; sub(/ms/, "", p)} /Requests\/sec/ {r = $2} END {print p, r}')
			printf '%-12s %6d %12.0f %8s %12s\n' "$g" "$round" "$rps" "$p99" "$(cpu_us "$g" "$before" "$(awk -v r="$rps" -v d="$DURATION" 'BEGIN {print r * d}')")"
		done
	done
fi

if want tcp; then
	want http && echo
	echo "# rotor's tcp listener, GOMAXPROCS=1 and 2, cores 0,1 shared with redis-benchmark -n $REQUESTS -c 50 -t set,get (pipelined: -n $((REQUESTS * 5)) -P 16) and redis; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	printf '%-12s %6s %10s %10s %12s %12s %11s %11s\n' GOMAXPROCS round SET GET "SET -P 16" "GET -P 16" "CPU us/req" "CPU, -P 16"
	for round in $(seq "$ROUNDS"); do
		order="1 2"
		[ $((round % 2)) = 0 ] && order="2 1"
		for g in $order; do
			before=$(cpu_ticks "${pid[$g]}")
			read -r set get < <(redis_rps taskset -c 0,1 redis-benchmark -p "${tcpport[$g]}" -n "$REQUESTS" -c 50 -t set,get -q)
			c=$(cpu_us "$g" "$before" $((REQUESTS * 2)))
			before=$(cpu_ticks "${pid[$g]}")
			read -r pset pget < <(redis_rps taskset -c 0,1 redis-benchmark -p "${tcpport[$g]}" -n $((REQUESTS * 5)) -c 50 -P 16 -t set,get -q)
			pc=$(cpu_us "$g" "$before" $((REQUESTS * 10)))
			printf '%-12s %6d %10.0f %10.0f %12.0f %12.0f %11s %11s\n' "$g" "$round" "$set" "$get" "$pset" "$pget" "$c" "$pc"
		done
	done
fi
