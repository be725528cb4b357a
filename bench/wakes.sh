#!/usr/bin/env bash
# Who wakes whom when a proxy shares its cores with its load: rotor and
# HAProxy, each in turn on the cores of wrk and three Go backends
# (bench/upstream), as bench/peers.sh's CORES=2 rows run them (CORES=1:
# the proxy alone on core 0, wrk and the backends on core 1, as its
# one-core rows). While wrk runs, perf records for a second the
# proxy's sends and every return from an epoll wait on the machine
# (syscalls tracepoints), and the script prints, a request:
#   - wrk's waits and the backends' (a wait that returns is a wake: a
#     process that found nothing to do slept, and was woken);
#   - the share of wrk's waits that returned a single event, and of
#     those the share that ran on the core of the proxy's last send
#     (the kernel puts a reader woken by a socket write beside the
#     writer, expecting it to sleep: a proxy that goes on sending is
#     then preempted by the reader it woke, which reads one answer);
#   - the proxy's threads' switches off their core, voluntary (it
#     slept) and involuntary (preempted, still ready to run).
# ROUNDS (default 3) runs each proxy that many times, taking turns, and
# prints each figure's median; REQUEST=post sends peers.sh's POSTs of
# 100-byte bodies in place of GETs. rotor runs as it is run, with no
# GOMAXPROCS (its tuner may take it to one P on full cores); ROTOR_ENV
# sets variables for it (ROTOR_ENV=GOMAXPROCS=2 holds two Ps).
# Needs: perf (Debian: linux-perf), haproxy, wrk, taskset, and the right
# to read the syscalls tracepoints (root, or kernel.perf_event_paranoid
# -1).
# Usage: bash bench/wakes.sh
#        CORES=1 REQUEST=post bash bench/wakes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs perf haproxy wrk taskset
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-50}
REQUEST=${REQUEST:-get}
case "$REQUEST" in get | post) ;; *) echo "REQUEST must be get or post" >&2; exit 1 ;; esac
CORES=${CORES:-2}
pin_cores
export WORKERS=$CORES
setup wakes
wrk_scripts
script=()
[ "$REQUEST" = post ] && script=(-s "$out/post.lua")

taskset -c "$load" "$out/upstream" 127.0.0.1:19611 127.0.0.1:19612 127.0.0.1:19613 &
pids+=($!)
declare -A pid port
web_config "$out/rotor.yaml" 127.0.0.1:18610 19611 19612 19613
read -ra rotor_env <<<"${ROTOR_ENV:-}"
env "${rotor_env[@]}" taskset -c "$pin" "$out/rotor" serve --config "$out/rotor.yaml" 2>"$out/rotor.log" &
pids+=($!)
pid[rotor]=$! port[rotor]=18610
haproxy_proxy "$pin" 18612 19611 19612 19613
pid[haproxy]=$! port[haproxy]=18612
for p in 19611 18610 18612; do wait_port "$p"; done

# ticks NAME: NAME's CPU time so far, for settle.
ticks() { cpu_ticks "${pid[$1]}"; }

declare -A v
# run NAME ROUND: one wrk run through NAME, a second of it recorded.
run() {
	local name=$1 data=$out/$1-$2.data w
	taskset -c "$load" wrk -t"$CORES" -c"$CONNS" -d6s "${script[@]}" "http://127.0.0.1:${port[$name]}/" > "$out/wrk-$name-$2.txt" &
	w=$!
	sleep 2
	perf record -q -a -o "$data" -e syscalls:sys_enter_sendto,syscalls:sys_enter_write,syscalls:sys_exit_epoll_wait,syscalls:sys_exit_epoll_pwait,sched:sched_switch -- sleep 1 2>/dev/null
	wait "$w"
	# Each wrk write is one request; the proxy's sends are its sendto
	# calls (rotor and HAProxy send with it); a return is a wait's end,
	# its value the events it found; a switch away from a proxy's thread
	# still ready to run (prev_state R) is a preemption.
	perf script -i "$data" -F comm,cpu,event,trace 2>/dev/null | awk -v proxy="$name" '
		function hex(s,   i, n, c) { n = 0; s = tolower(s); sub(/^0x/, "", s); for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)); n = n * 16 + c - 1 }; return n }
		{ comm = $1; cpu = $2 }
		comm == "wrk" && /sys_enter_write/ { req++ }
		comm == proxy && /sys_enter_sendto/ { last = cpu }
		/sys_exit_epoll/ {
			r = hex($NF)
			if (comm == "wrk") { waits++; if (r == 1) { one++; if (cpu == last) beside++ } }
			else if (comm == "upstream") back++
		}
		/sched_switch/ && index($0, "prev_comm=" proxy " ") { if (/prev_state=R/) inv++; else vol++ }
		END {
			if (!req || !waits) {
				print "wakes.sh: nothing recorded; perf needs the syscalls tracepoints (root, or kernel.perf_event_paranoid -1)" > "/dev/stderr"
				exit 1
			}
			printf "%.3f %.2f %.2f %.3f %.3f %.3f\n", waits / req, one / waits, beside / (one ? one : 1), back / req, vol / req, inv / req
		}' > "$out/$name-$2.txt"
	read -r wr one beside back vol inv < "$out/$name-$2.txt"
	v[wait-$name]+="$wr " v[one-$name]+="$one " v[beside-$name]+="$beside " v[back-$name]+="$back " v[vol-$name]+="$vol " v[inv-$name]+="$inv "
	v[rps-$name]+="$(awk '/Requests\/sec/ {print $2}' "$out/wrk-$name-$2.txt") "
	rm -f "$data"
}

what=GETs
[ "$REQUEST" = post ] && what="POSTs of 100 bytes"
echo "# who wakes whom: HTTP/1.1 $what, wrk -t$CORES -c$CONNS; each proxy on cores $pin, wrk and three Go backends on cores $load; $ROUNDS rounds taking turns, medians; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note)"
echo "# rotor: the working tree on $(git rev-parse --short HEAD)${ROTOR_ENV:+ with $ROTOR_ENV}; $(haproxy -v | head -1 | cut -d' ' -f1-3)"
for round in $(seq "$ROUNDS"); do
	for name in $(turn "rotor haproxy" "$round"); do
		settle
		run "$name" "$round"
	done
done
printf "%-8s %10s %14s %14s %14s %16s %18s\n" target "req/s" "wrk waits/req" "one event" "beside proxy" "backend waits/req" "proxy switches/req"
for name in rotor haproxy; do
	printf "%-8s %10s %14s %14s %14s %16s %18s\n" "$name" "$(median <<<"${v[rps-$name]}")" "$(median <<<"${v[wait-$name]}")" \
		"$(median <<<"${v[one-$name]}")" "$(median <<<"${v[beside-$name]}")" "$(median <<<"${v[back-$name]}")" \
		"$(median <<<"${v[vol-$name]}")/$(median <<<"${v[inv-$name]}")"
done
