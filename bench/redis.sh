#!/usr/bin/env bash
# TCP through rotor's tcp listener beside HAProxy's mode tcp, round by
# round: redis-benchmark SET and GET (-c 50), plain and pipelined (-P
# 16), through each to one redis-server. Each proxy on core 0 (one
# thread, GOMAXPROCS=1), redis-server and redis-benchmark on core 1, so
# that the load's core is the limit and each proxy's way of passing the
# messages on sets how much of it they get (bench/peers.sh's tcp rows,
# paired). With BASE, a git revision, its rotor runs beside the working
# tree's. ROUNDS rounds (default 7), the targets taking another order
# each round; each row gives a target's medians (requests/s, and its CPU
# time a request from /proc, plain and pipelined), and its rates and CPU
# over HAProxy's and, with BASE, over the base's, each round's against
# the same round's: the median and the range. Each round's figures go to
# bench/out/redis/rounds.txt.
# Needs: redis-server, redis-benchmark, haproxy, taskset (git with BASE).
# Usage: bash bench/redis.sh [BASE] > bench/out/redis.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs redis-server redis-benchmark haproxy taskset
BASE=${1:-}
ROUNDS=${ROUNDS:-7}
REQUESTS=${REQUESTS:-200000}
setup redis
started=$(date -u +%Y-%m-%dT%H:%MZ)
if [ -n "$BASE" ]; then
	needs git
	build_base "$BASE"
fi
start_redis 1 19479
declare -A port pid
rotor_at() { # NAME BINARY PORT
	cat > "$out/$1.yaml" <<YAML
admin: {listen: "off"}
listeners: [{name: redis, kind: tcp, listen: "127.0.0.1:$3", pool: redis}]
pools: [{name: redis, endpoints: [{name: r, address: "127.0.0.1:19479"}]}]
YAML
	GOMAXPROCS=1 taskset -c 0 "$2" serve --config "$out/$1.yaml" 2>"$out/$1.log" &
	pids+=($!)
	pid[$1]=$! port[$1]=$3
}
rotor_at rotor "$out/rotor" 18480
targets="rotor haproxy"
if [ -n "$BASE" ]; then
	rotor_at base "$out/rotor-base" 18481
	targets="rotor base haproxy"
fi
cat > "$out/haproxy.cfg" <<HAPROXY
global
  nbthread 1
defaults
  mode tcp
  timeout connect 2s
  timeout client 30s
  timeout server 30s
listen redis
  bind 127.0.0.1:18482
  server r 127.0.0.1:19479
HAPROXY
taskset -c 0 haproxy -f "$out/haproxy.cfg" -db >"$out/haproxy.log" 2>&1 &
pids+=($!)
pid[haproxy]=$! port[haproxy]=18482
for t in $targets; do wait_port "${port[$t]}"; done
wait_port 19479

# Each target's figures, a column a round: SET, GET, SET -P 16, GET -P
# 16, CPU us a request plain, and pipelined.
declare -A fig
hz=$(getconf CLK_TCK)
for round in $(seq "$ROUNDS"); do
	for t in $(turn "$targets" "$round"); do
		t0=$(cpu_ticks "${pid[$t]}")
		read -r set get <<<"$(redis_rps taskset -c 1 redis-benchmark -p "${port[$t]}" -n "$REQUESTS" -c 50 -t set,get -q)"
		t1=$(cpu_ticks "${pid[$t]}")
		read -r pset pget <<<"$(redis_rps taskset -c 1 redis-benchmark -p "${port[$t]}" -n "$((REQUESTS * 10))" -c 50 -P 16 -t set,get -q)"
		t2=$(cpu_ticks "${pid[$t]}")
		cpu=$(awk -v t=$((t1 - t0)) -v n="$REQUESTS" -v hz="$hz" 'BEGIN {printf "%.2f", t / hz * 1e6 / (2 * n)}')
		pcpu=$(awk -v t=$((t2 - t1)) -v n="$((REQUESTS * 10))" -v hz="$hz" 'BEGIN {printf "%.3f", t / hz * 1e6 / (2 * n)}')
		echo "$round $t $set $get $pset $pget $cpu $pcpu" >>"$out/rounds.txt"
		i=0
		for v in "$set" "$get" "$pset" "$pget" "$cpu" "$pcpu"; do
			fig[$t,$i]+="$v "
			i=$((i + 1))
		done
	done
done

echo "# redis-benchmark -c 50 SET and GET through each, plain (-n $REQUESTS) and -P 16 (-n $((REQUESTS * 10))), each proxy on core 0, redis on core 1; $ROUNDS rounds taking turns; $started, $(cores_note), $(go version | cut -d' ' -f3)"
echo "# rotor: the working tree on $(git rev-parse --short HEAD)${BASE:+; base: $BASE}; $(haproxy -v | head -1 | cut -d' ' -f1-3); $(redis-server --version | cut -d' ' -f1-3)"
names=(SET GET "SET -P 16" "GET -P 16" "CPU us" "CPU us, -P 16")
printf "%-8s %10s %10s %10s %10s %8s %14s\n" target SET GET "SET -P 16" "GET -P 16" "CPU us" "CPU us, -P 16"
for t in $targets; do
	printf "%-8s" "$t"
	for i in 0 1 2 3; do printf " %10.0f" "$(median <<<"${fig[$t,$i]}")"; done
	printf " %8s %14s\n" "$(median <<<"${fig[$t,4]}")" "$(median <<<"${fig[$t,5]}")"
done
over() { # A B: A's figures over B's, round by round
	echo "$1 over $2, round by round:"
	for i in 0 1 2 3 4 5; do
		printf "  %-14s %s\n" "${names[i]}" "$(paired "${fig[$1,$i]}" "${fig[$2,$i]}")"
	done
}
for t in $targets; do
	[ "$t" = haproxy ] || over "$t" haproxy
done
[ -z "$BASE" ] || over rotor base
