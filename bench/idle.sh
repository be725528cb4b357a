#!/usr/bin/env bash
# Clients that idle between requests, through rotor: what holding an
# idle client costs rotor's CPU when the client comes back. The working
# tree and the git revision BASE (default: main) are built and started
# side by side, each on core 0 with GOMAXPROCS=1, over bench/upstream on
# core 1; bench/idlers (core 1) keeps CONNS keep-alive connections
# (default 500), each sending a GET every EVERY (±10%) for DURATION
# (default 10s), to one rotor, then to the other, taking turns ROUNDS
# times (default 3) for each EVERY of EVERIES (default "50ms 300ms 2s":
# a client back before the ticker's tick, one back after a tick or two,
# when a connection of the short way has parked, and one back after
# seconds). For each it prints each side's median requests a second and
# rotor's CPU time a request (from /proc), and the median and range of
# the paired ratios of the CPU a request, new over base.
# Usage: bash bench/idle.sh [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs taskset git
BASE=${1:-main}
CONNS=${CONNS:-500}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
EVERIES=${EVERIES:-50ms 300ms 2s}
setup idle
mv "$out/rotor" "$out/rotor-new"
build_base "$BASE"
go build -o "$out/idlers" ./bench/idlers

taskset -c 1 "$out/upstream" 127.0.0.1:19501 & pids+=($!)
declare -A port pid
port[new]=18501
port[base]=18502
for t in new base; do
	cat > "$out/$t.yaml" <<YAML
admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:${port[$t]}", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "http://127.0.0.1:19501"}]}]
YAML
	GOMAXPROCS=1 taskset -c 0 "$out/rotor-$t" serve --config "$out/$t.yaml" 2>"$out/rotor-$t.log" & pids+=($!)
	pid[$t]=$!
done
for p in 19501 18501 18502; do wait_port "$p"; done
hz=$(getconf CLK_TCK)

echo "# $CONNS keep-alive clients, each a GET every EVERY (±10%) for $DURATION, through rotor on core 0 (GOMAXPROCS=1), clients and bench/upstream on core 1; $ROUNDS rounds taking turns, medians; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go version | cut -d' ' -f3)"
echo "# rotor: the working tree on $(git rev-parse --short HEAD); base: $(git -C "$base_tree" rev-parse --short HEAD)"
printf "%-7s %-6s %10s %14s %8s %22s\n" every target "req/s" "CPU us a req" failed "CPU a req, new/base"
for every in $EVERIES; do
	declare -A rates=() cpus=() fails=()
	for r in $(seq "$ROUNDS"); do
		for t in $(turn "new base" "$r"); do
			t0=$(cpu_ticks "${pid[$t]}")
			start=$(date +%s.%N)
			read -r done failed < <(taskset -c 1 "$out/idlers" -addr "127.0.0.1:${port[$t]}" -conns "$CONNS" -every "$every" -for "$DURATION")
			t1=$(cpu_ticks "${pid[$t]}")
			took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
			rates[$t]+="$(awk -v n="$done" -v s="$took" 'BEGIN {printf "%.0f", n / s}') "
			cpus[$t]+="$(awk -v d="$((t1 - t0))" -v hz="$hz" -v n="$done" 'BEGIN {if (n > 0) printf "%.1f", d / hz * 1e6 / n}') "
			fails[$t]=$((${fails[$t]:-0} + failed))
		done
	done
	for t in new base; do
		ratio=-
		[ "$t" = new ] && ratio=$(paired "${cpus[new]}" "${cpus[base]}")
		printf "%-7s %-6s %10s %14s %8s %22s\n" "$every" "$t" "$(median <<<"${rates[$t]}")" "$(median <<<"${cpus[$t]}")" "${fails[$t]}" "$ratio"
	done
done
