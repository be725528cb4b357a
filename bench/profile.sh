#!/usr/bin/env bash
# Where rotor's HTTP/1.1 reverse proxy spends its CPU: wrk against rotor
# (one core, GOMAXPROCS=1, three local backends on the other core) with
# `rotor serve --cpu-profile`, then the profile's top functions, flat and
# cumulative, and the share of time in each layer; and from
# `--alloc-profile`, the bytes and objects allocated a request (sampled)
# and the functions that allocate most.
# PROTO=h2 profiles HTTP/2 over TLS instead: h2load -c 20 -m 10 against a
# TLS listener (self-signed certificate), HTTP/1.1 to the backends;
# PROTO=tls, HTTP/1.1 over TLS: wrk to the same listener.
# POST_BYTES=N makes wrk's requests POSTs of N-byte bodies; CHUNKED=1
# sends those bodies chunked, with no Content-Length.
# STRACE=1 also counts rotor's system calls per request (strace);
# PERF=1 counts its reads, writes, sends, receives, poller waits, futex
# calls, sleeps and all its system calls a request with perf's
# tracepoints, which do not slow it as strace does (each over a short
# run of its own).
# CORES=2 gives rotor both cores (GOMAXPROCS=2), shared with the load and
# the backends, as peers.sh's two-core run does: where a second core's
# time goes.
# Needs: wrk, taskset (and h2load, openssl for PROTO=h2; strace for
# STRACE=1; perf, as root, for PERF=1).
# Usage: bash bench/profile.sh > bench/out/profile.txt
#        PROTO=h2 bash bench/profile.sh > bench/out/profile-h2.txt
#   (the profiles stay in bench/out/profile/cpu.pprof and allocs.pprof
#   for go tool pprof)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk taskset
[ "${PROTO:-}" = h2 ] && needs h2load openssl
[ "${PROTO:-}" = tls ] && needs openssl
[ "${STRACE:-}" = 1 ] && needs strace
[ "${PERF:-}" = 1 ] && needs perf
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
PROTO=${PROTO:-http1}
case "$PROTO" in http1 | h2 | tls) ;; *) echo "PROTO must be http1, h2 or tls" >&2; exit 1 ;; esac
pin_cores
setup profile

taskset -c $load "$out/upstream" 127.0.0.1:19201 127.0.0.1:19202 127.0.0.1:19203 & pids+=($!)
tls="" scheme=http
if [ "$PROTO" != http1 ]; then
	selfsigned
	tls=", tls: {cert: cert.pem, key: key.pem}" scheme=https
fi
web_config "$out/rotor.yaml" 127.0.0.1:18200 19201 19202 19203 "$tls"
GOMAXPROCS=$CORES taskset -c $pin "$out/rotor" serve --config "$out/rotor.yaml" --cpu-profile "$out/cpu.pprof" --alloc-profile "$out/allocs.pprof" 2>"$out/rotor.log" &
rotor=$!
pids+=($rotor)
for url in http://127.0.0.1:19201/ "$scheme://127.0.0.1:18200/"; do
	for _ in $(seq 50); do curl -ksf "$url" >/dev/null && break; sleep 0.1; done
done

rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
wrk_scripts
# load [SHORT]: one run of the load (SHORT: a 3 s wrk run, or 30,000
# HTTP/2 requests, for the counts below); prints the requests it made.
served=0
load() {
	if [ "$PROTO" = h2 ]; then
		local n=100000
		[ -n "${1:-}" ] && n=30000
		taskset -c $load h2load -t "$CORES" -n "$n" -c 20 -m 10 https://127.0.0.1:18200/ >"$out/load.txt"
		awk '/^requests:/ {print $8}' "$out/load.txt"
	else
		local d=$DURATION
		[ -n "${1:-}" ] && d=3s
		local script=post
		[ "${CHUNKED:-}" = 1 ] && script=chunked
		taskset -c $load wrk -t"$CORES" -c"$CONNS" -d"$d" --latency ${POST_BYTES:+-s "$out/$script.lua"} "$scheme://127.0.0.1:18200/" >"$out/load.txt"
		awk '/requests in/ {print $1}' "$out/load.txt"
	fi
}
if [ "$PROTO" = h2 ]; then
	echo "# h2load -n 100000 -c 20 -m 10 over TLS through rotor ($CORES core(s)), $rev"
else
	echo "# wrk -t$CORES -c$CONNS -d$DURATION${POST_BYTES:+, POSTs of $POST_BYTES bytes${CHUNKED:+ chunked},} through rotor ($CORES core(s)), $scheme, $rev"
fi
n=$(load)
served=$((served + n))
grep -E '^finished in|^status codes|Requests/sec|99%' "$out/load.txt"
# traced TRACER...: a short run of the load with TRACER (strace or perf,
# on rotor) counting; prints the requests the run made.
traced() {
	"$@" &
	local tr=$! n
	sleep 0.5
	n=$(load short)
	kill -INT "$tr"
	wait "$tr" || true
	echo "$n"
}
if [ "${STRACE:-}" = 1 ]; then
	# System calls per request: strace -c -f on rotor over a short run
	# of its own. strace slows rotor, so a read finds its bytes waiting
	# more often than it would: the EAGAINs it counts are fewer than
	# without it.
	n=$(traced strace -c -f -p "$rotor" -o "$out/strace.txt")
	served=$((served + n))
	echo
	echo "# system calls per request (strace -c -f over $n requests)"
	awk -v n="$n" '$NF ~ /^(read|write|recvfrom|sendto|sendmsg|epoll_pwait|futex)$/ {e = ($5 ~ /^[0-9]+$/) ? $5 : 0; printf "%-12s %6.2f a request (%.2f of them errors)\n", $NF, $4 / n, e / n}' "$out/strace.txt"
fi
if [ "${PERF:-}" = 1 ]; then
	n=$(traced perf stat -x, -o "$out/perf.txt" -p "$rotor" \
		-e syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_sendmsg,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_futex,syscalls:sys_enter_nanosleep,raw_syscalls:sys_enter)
	served=$((served + n))
	echo
	echo "# system calls per request (perf stat over $n requests)"
	awk -F, -v n="$n" '$3 ~ /syscalls:sys_enter/ {e = $3; sub(/^(raw_)?syscalls:sys_enter_?/, "", e); if (e == "") e = "(all)"; printf "%-12s %6.2f a request\n", e, $1 / n}' "$out/perf.txt"
fi
kill -TERM "$rotor"
wait "$rotor" || true

echo
echo "# top 25 by flat time"
go tool pprof -top -nodecount=25 "$out/rotor" "$out/cpu.pprof" 2>/dev/null | sed -n '/flat%/,$p'
echo
echo "# share of the samples under each layer (cumulative)"
go tool pprof -top -cum -nodecount=400 "$out/rotor" "$out/cpu.pprof" 2>/dev/null |
	awk '$6 ~ /^(net\/http\.\(\*conn\)\.serve|net\/http\.\(\*http2serverConn\)\.(runHandler|writeFrameAsync|Flush)|crypto\/tls\.\(\*Conn\)\.Write|runtime\.newstack|net\/http\.\(\*persistConn\)\.(readLoop|writeLoop)|net\/http\/httputil\.\(\*ReverseProxy\)\.ServeHTTP|net\/http\.\(\*Transport\)\.roundTrip|github\.com\/rotor-lb\/rotor\/proxy\/reverse\..*ServeHTTP|github\.com\/rotor-lb\/rotor\/proxy\/h1\.\(\*Transport\)\.RoundTrip|github\.com\/rotor-lb\/rotor\/proxy\/h1\.\(\*clientConn\)\.serve|github\.com\/rotor-lb\/rotor\/server\..*|runtime\.(gcBgMarkWorker|mallocgc|findRunnable|netpoll)|syscall\.Syscall.*|internal\/poll\.\(\*FD\)\.(Read|Write))$/ {print $5, $6}' | head -30
echo
echo "# allocations a request, over the $served requests of the run (sampled: go tool pprof -sample_index=alloc_space)"
go tool pprof -raw "$out/rotor" "$out/allocs.pprof" 2>/dev/null |
	awk -v n="$served" '/^Samples:/ {s = 1; next} s && /^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+:/ {o += $1; b += $2} /^Locations/ {s = 0} END {printf "%.1f objects, %.0f bytes a request\n", o / n, b / n}'
echo
echo "# top 15 by bytes allocated"
go tool pprof -sample_index=alloc_space -top -nodecount=15 "$out/rotor" "$out/allocs.pprof" 2>/dev/null | sed -n '/flat%/,$p'
