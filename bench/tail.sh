#!/usr/bin/env bash
# HTTP/1.1's tail with the proxy's core the limit: rotor (the working
# tree, and the git revision BASE too when given), HAProxy and nginx,
# each on core 0 (one thread or worker, GOMAXPROCS=1), proxying GETs to
# three backends nginx answers from memory on core 1, under wrk -t1 on
# core 1, at each connection count of CONNS (default "10 50"), ROUNDS
# rounds (default 5) with the targets taking turns. For each target it
# prints the medians of the rate, of wrk's percentiles from p50 to p99.9,
# of the CPU a request (the proxy's, its user-space part beside it, and
# the load's: wrk's and the backends' together, what the proxy's way of
# writing and waking costs its neighbours), of how busy the proxy's core was (near 100: the
# proxy is the limit, as this script means it to be), of the time the
# proxy's threads waited for a core while ready to run (in cores: 0.3 is
# 0.3 s waited a second), of the load's switches off its core a request
# (wrk's and the backends', voluntary and not: how often the proxy's
# way of answering makes its neighbours sleep or yield) and, for rotor, of
# the requests between two collections (GODEBUG=gctrace=1); and its rate
# and p99 over HAProxy's, round by round (the median, and the range),
# and with BASE, the working tree's rate, p99 and CPU a request over the
# base's. Go backends (bench/peers.sh's "get") leave the load's core
# the limit and the proxy's a quarter idle; here the proxy's own work
# sets the rate and the tail. The peers send the backends the
# forwarding fields rotor sends (FORWARDED, bench/setup.sh; the runs
# before 1348ac1, 2026-12-04 06:33Z, had them bare).
# SHARED=1 runs the backends on core 0 with the proxies instead: a core
# the proxy shares with other work, full while the proxy's own share of
# it is about 70%.
# CORES=2 gives every proxy both cores (HAProxy nbthread 2, two nginx
# workers, and rotor Go's count of them, 2, which its tuner may lower
# while the cores are full: internal/procs), shared with the backends and
# with wrk -t2, as bench/peers.sh's CORES=2 does: how the tail scales to
# a second core. rotor runs with no GOMAXPROCS set (taskset gives Go its
# count); BASE_ENV=GOMAXPROCS=2 holds a base at two.
# BACKENDS=go runs bench/upstream, the Go backends of bench/peers.sh's
# "get" and "post", in place of nginx's: the load's side, not the
# proxy, is the limit then, and the load columns say what each proxy's
# way of sending costs it. REQUEST=post sends POSTs of 100-byte bodies
# (peers.sh's post.lua; POST_BYTES=N: N-byte ones) in place of GETs;
# REQUEST=chunked the same bodies chunked, with no Content-Length.
# WARMUP=2s runs the same load for that long, unmeasured, before each
# measured run: the steady state alone, without a run's first moments
# (rotor's tuner, internal/procs, gives up its second P half a second
# into a run on full cores).
# BASE_ENV sets variables for the base's rotor alone (BASE_ENV=GOGC=off
# with BASE=HEAD sizes a runtime setting against the code as it is).
# Needs: nginx, haproxy, wrk, taskset, git, GNU time (Debian: nginx-light
# haproxy wrk util-linux git time).
# Usage: bash bench/tail.sh [BASE]
#        CONNS="10 50 200" ROUNDS=7 DURATION=10s bash bench/tail.sh 8b4e74c
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs nginx haproxy wrk taskset git /usr/bin/time
BASE=${1:-}
CONNS=${CONNS:-10 50}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-}
setup tail
CORES=${CORES:-1}
SHARED=${SHARED:-0}
case "$CORES/$SHARED" in
1/0) pin=0 load=1 backends=1 where="on core 1" ;;
1/1) pin=0 load=1 backends=0 where="on core 0, shared with the proxy" ;;
2/0) pin=0,1 load=0,1 backends=0,1 where="on cores 0,1, shared with the proxy and the load" ;;
*) echo "CORES must be 1 or 2, SHARED 0 or 1 (and 0 with CORES=2)" >&2; exit 1 ;;
esac
export WORKERS=$CORES
BACKENDS=${BACKENDS:-nginx}
REQUEST=${REQUEST:-get}
case "$BACKENDS/$REQUEST" in
nginx/get | go/get | go/post | go/chunked) ;;
nginx/post | nginx/chunked) echo "REQUEST=$REQUEST needs BACKENDS=go: nginx's return answers before a body arrives" >&2; exit 1 ;;
*) echo "BACKENDS must be nginx or go, REQUEST get, post or chunked" >&2; exit 1 ;;
esac

declare -A pid
if [ "$BACKENDS" = go ]; then
	taskset -c "$backends" "$out/upstream" 127.0.0.1:19311 127.0.0.1:19312 127.0.0.1:19313 &
	pids+=($!)
	kind="three Go backends (bench/upstream)"
else
	nginx_backends "$backends" 19311 19312 19313
	kind="three nginx backends (from memory)"
fi
pid[backends]=$!
# start_rotor NAME BINARY PORT [VAR=VALUE...] runs a rotor on core 0 on
# PORT, with the variables given, its collections traced to
# $out/NAME.log. No GOMAXPROCS: Go counts the cores taskset gives it.
start_rotor() {
	web_config "$out/$1.yaml" "127.0.0.1:$3" 19311 19312 19313
	env GODEBUG=gctrace=1 "${@:4}" taskset -c $pin "$2" serve --config "$out/$1.yaml" 2>"$out/$1.log" &
	pids+=($!)
	pid[$1]=$!
}
start_rotor rotor "$out/rotor" 18170
targets="rotor=18170"
if [ -n "$BASE" ]; then
	build_base "$BASE"
	read -ra base_env <<<"${BASE_ENV:-}"
	start_rotor base "$out/rotor-base" 18174 "${base_env[@]}"
	targets+=" base=18174"
fi

nginx_proxy $pin 18171 19311 19312 19313
pid[nginx]=$!
haproxy_proxy $pin 18172 19311 19312 19313
pid[haproxy]=$!
targets+=" haproxy=18172 nginx=18171"
for port in 19311 18170 18171 18172 ${BASE:+18174}; do wait_port "$port"; done

# wrk's own percentiles, in ms, one "pct P MS" line each; with
# REQUEST=post, its requests peers.sh's POSTs.
wrk_scripts
{
	[ "$REQUEST" = get ] || cat "$out/$REQUEST.lua"
	cat <<'LUA'
done = function(summary, latency, requests)
  for _, p in ipairs({50, 75, 90, 99, 99.9}) do
    io.write(string.format("pct %g %.3f\n", p, latency:percentile(p) / 1000))
  end
end
LUA
} > "$out/pct.lua"
# procs NAME: NAME's processes, its own and its children (nginx's
# workers).
procs() { echo "${pid[$1]}" $(pgrep -P "${pid[$1]}"); }
# ticks NAME: the CPU time NAME's processes have used, in clock ticks.
ticks() { cpu_ticks $(procs "$1"); }
# user NAME: the part of ticks NAME spent in user space.
user() { user_ticks $(procs "$1"); }
# waited NAME: the time NAME's threads have waited for a core while
# ready to run, in ns.
waited() { wait_ns $(procs "$1"); }
# switches NAME: the context switches NAME's threads have made so far,
# voluntary and not.
switches() { switch_count $(procs "$1"); }
# load_ticks VAR sets VAR to the CPU time the backends and the finished
# wrk runs have used, in clock ticks (the runs' from bash's times, the
# shell's children's, which only the shell itself sees: not a $(...)).
load_ticks() {
	times > "$out/times"
	printf -v "$1" %s "$(awk -v b="$(ticks backends)" -v hz="$hz" 'END {for (i = 1; i <= 2; i++) {split($i, a, /[ms]/); t += a[1] * 60 + a[2]}; printf "%d", t * hz + b}' "$out/times")"
}
# cycles NAME: the collections a rotor has run so far ("-" for a peer).
cycles() {
	case $1 in
	rotor | base) grep -c '^gc ' "$out/$1.log" || true ;;
	*) echo - ;;
	esac
}
hz=$(getconf CLK_TCK)
declare -A v
# run CONNS NAME PORT ROUND: one wrk run through NAME, its figures kept.
run() {
	local c=$1 name=$2 port=$3 f=$out/wrk-$1-$2-$4.txt t0 u0 g0 n g1 k0 l0 l1 w0 s0 b0
	if [ -n "$WARMUP" ]; then
		taskset -c $load wrk -t"$CORES" -c"$c" -d"$WARMUP" -s "$out/pct.lua" "http://127.0.0.1:$port/" > /dev/null
	fi
	t0=$(ticks "$name") u0=$(user "$name") g0=$(cycles "$name") k0=$(core_ticks $pin) w0=$(waited "$name") s0=$(date +%s%N) b0=$(switches backends)
	load_ticks l0
	/usr/bin/time -f "%c %w" -o "$out/wrk-switches" taskset -c $load wrk -t"$CORES" -c"$c" -d"$DURATION" -s "$out/pct.lua" "http://127.0.0.1:$port/" > "$f"
	v[$c-busy-$name]+="$(core_busy "$k0" "$(core_ticks $pin)") "
	v[$c-wait-$name]+="$(awk -v w="$(($(waited "$name") - w0))" -v s="$(($(date +%s%N) - s0))" 'BEGIN {printf "%.2f", w / s}') "
	n=$(awk '/requests in/ {print $1}' "$f")
	v[$c-rps-$name]+="$(awk '/Requests\/sec/ {print $2}' "$f") "
	v[$c-cpu-$name]+="$(awk -v t="$(($(ticks "$name") - t0))" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.1f", t * 1e6 / hz / n}') "
	v[$c-user-$name]+="$(awk -v t="$(($(user "$name") - u0))" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.1f", t * 1e6 / hz / n}') "
	load_ticks l1
	v[$c-load-$name]+="$(awk -v t="$((l1 - l0))" -v hz="$hz" -v n="$n" 'BEGIN {printf "%.1f", t * 1e6 / hz / n}') "
	v[$c-sw-$name]+="$(awk -v b="$(($(switches backends) - b0))" -v n="$n" '{printf "%.3f", (b + $1 + $2) / n}' "$out/wrk-switches") "
	for p in 50 75 90 99 99.9; do v[$c-p$p-$name]+="$(awk -v p="$p" '$1 == "pct" && $2 == p {print $3}' "$f") "; done
	g1=$(cycles "$name")
	if [ "$g1" != - ] && [ "$g1" -gt "$g0" ]; then
		v[$c-gc-$name]+="$((n / (g1 - g0))) "
	fi
	v[$c-err-$name]+="$(awk '/Non-2xx|Socket errors/ {printf "%s ", $0}' "$f")"
}

what="GETs, the proxy's cores the limit"
[ "$BACKENDS" = go ] && what="GETs, the load's side the limit"
[ "$REQUEST" = post ] && what="POSTs of ${POST_BYTES:-100} bytes, the load's side the limit"
[ "$REQUEST" = chunked ] && what="chunked POSTs of ${POST_BYTES:-100} bytes, the load's side the limit"
echo "# HTTP/1.1 $what: each proxy on cores $pin ($CORES worker(s) or P(s)), wrk -t$CORES -d$DURATION on cores $load, $kind $where, $ROUNDS rounds taking turns, medians; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go version | cut -d' ' -f3)"
echo "# rotor: the working tree on $(git rev-parse --short HEAD)${BASE:+; base: $BASE}${BASE_ENV:+ with $BASE_ENV}; $(haproxy -v | head -1 | cut -d' ' -f1-3); $(nginx -v 2>&1 | cut -d' ' -f3)"
forwarding_note
for c in $CONNS; do
	for round in $(seq "$ROUNDS"); do
		for target in $(turn "$targets" "$round"); do
			settle
			run "$c" "${target%=*}" "${target#*=}" "$round"
		done
	done
	echo
	echo "## -c$c"
	printf "%-8s %10s %7s %7s %7s %7s %7s %8s %8s %8s %7s %6s %6s %9s %18s %18s\n" target "req/s" p50 p75 p90 p99 p99.9 "CPU us" "user us" "load us" "load sw" "busy%" "wait" "req/GC" "rate/HAProxy's" "p99/HAProxy's"
	for target in $targets; do
		name=${target%=*}
		printf "%-8s %10s" "$name" "$(median <<<"${v[$c-rps-$name]}")"
		for p in 50 75 90 99 99.9; do printf " %7s" "$(median <<<"${v[$c-p$p-$name]}")"; done
		printf " %8s %8s %8s %7s %6s %6s %9s %18s %18s %s\n" "$(median <<<"${v[$c-cpu-$name]}")" "$(median <<<"${v[$c-user-$name]}")" "$(median <<<"${v[$c-load-$name]}")" "$(median <<<"${v[$c-sw-$name]}")" "$(median <<<"${v[$c-busy-$name]}")" "$(median <<<"${v[$c-wait-$name]}")" "$(median <<<"${v[$c-gc-$name]:-}")" \
			"$(paired "${v[$c-rps-$name]}" "${v[$c-rps-haproxy]}")" "$(paired "${v[$c-p99-$name]}" "${v[$c-p99-haproxy]}")" "${v[$c-err-$name]:-}"
	done
	if [ -n "$BASE" ]; then
		echo "rotor over base, round by round: rate $(paired "${v[$c-rps-rotor]}" "${v[$c-rps-base]}"), p99 $(paired "${v[$c-p99-rotor]}" "${v[$c-p99-base]}"), CPU a request $(paired "${v[$c-cpu-rotor]}" "${v[$c-cpu-base]}")"
	fi
done
