#!/usr/bin/env bash
# The user-space instructions rotor spends a request, counted by valgrind
# (callgrind), for the working tree and the git revision BASE (default:
# main): what a change to the HTTP path costs or saves, the same count
# whatever else the machine is doing (wall-clock runs on this shared
# machine swing by a quarter; this does not move by 0.5%). Each rotor
# runs alone on core 0 (GOMAXPROCS=1, its heap's floor as rotor serve
# sets it) under callgrind over three bench/upstream backends on core 1;
# h2load warms it with 3,000 requests, then the count runs over N more
# (default 20,000), 50 connections, HTTP/1.1: GETs, and POSTs of a
# 100-byte body. The system calls' own cost is the kernel's and is not
# counted: bench/compare.sh measures it with the rest.
# callgrind also plays each through a model of the first-level caches
# (32 KiB of code and 32 KiB of data, 64-byte lines, 8-way: --cache-sim):
# the lines of code and of data a request misses there are printed too.
# Straight-line code is fetched once a request whatever its instruction
# count, so a path can run fewer instructions than another and still
# cost more, in misses of code its core has to fetch again each time.
# HAPROXY=1 counts HAProxy (one thread, the forwarding fields as
# FORWARDED says, bench/setup.sh) under the same load too; its line
# gives the new build's instructions over its.
# Needs: valgrind, h2load, taskset, git (Debian: valgrind nghttp2-client
# util-linux git); haproxy with HAPROXY=1.
# TOP=N prints too, for the new build's GETs, the N functions that miss
# the most lines of code a request (callgrind's own counts, inlined code
# under the function it came from), and the lines missed by whose code:
# rotor's, Go's runtime's (the scheduler, maps, the allocator), the rest.
# Usage: bash bench/instructions.sh [BASE] > bench/out/instructions.txt
#        HAPROXY=1 bash bench/instructions.sh HEAD
#        TOP=30 bash bench/instructions.sh HEAD
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs valgrind callgrind_control callgrind_annotate h2load taskset git
BASE=${1:-main}
N=${N:-20000}
setup instructions
build_base "$BASE"
mv "$out/rotor" "$out/rotor-new"

taskset -c 1 "$out/upstream" 127.0.0.1:19601 127.0.0.1:19602 127.0.0.1:19603 & pids+=($!)
web_config "$out/rotor.yaml" 127.0.0.1:18600 19601 19602 19603
head -c 100 /dev/zero | tr '\0' x > "$out/post.txt"
for _ in $(seq 50); do curl -sf http://127.0.0.1:19601/ >/dev/null && break; sleep 0.1; done

# count KIND COMMAND...: what a request costs COMMAND, a proxy it starts
# on 127.0.0.1:18600 in front of the three backends, under callgrind, for
# KIND's requests (get, post): "INSTRUCTIONS CODE-MISSES DATA-MISSES".
count() {
	local kind=$1 vp f args=()
	shift
	[ "$kind" = post ] && args=(-d "$out/post.txt")
	# No asynchronous preemption: its signals trip callgrind now and then
	# (an assertion in its signal handling).
	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 taskset -c 0 valgrind --tool=callgrind --cache-sim=yes \
		--callgrind-out-file="$out/callgrind.%p" --instr-atstart=no "$@" >/dev/null 2>"$out/valgrind.log" &
	vp=$!
	for _ in $(seq 100); do curl -sf http://127.0.0.1:18600/ >/dev/null && break; sleep 0.2; done
	taskset -c 1 h2load --h1 -n 3000 -c 50 "${args[@]}" http://127.0.0.1:18600/ >/dev/null
	callgrind_control -i on "$vp" >/dev/null 2>&1
	local res
	res=$(taskset -c 1 h2load --h1 -n "$N" -c 50 "${args[@]}" http://127.0.0.1:18600/)
	if ! grep -q "status codes: $N 2xx" <<<"$res"; then
		echo "not every request was answered 2xx: $(grep 'status codes' <<<"$res")" >&2
		kill "$vp"
		return 1
	fi
	callgrind_control -d "$vp" >/dev/null 2>&1
	kill "$vp"
	wait "$vp" 2>/dev/null || true
	f=$(ls "$out"/callgrind."$vp".* | head -1)
	# The totals' columns: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
	callgrind_annotate "$f" 2>/dev/null | awk -v n="$N" '/PROGRAM TOTALS/ {
		gsub(/\([^)]*\)/, ""); gsub(",", ""); printf "%.0f %.0f %.0f", $1 / n, $4 / n, ($5 + $6) / n}'
	[ -n "${keep:-}" ] && cp "$f" "$keep"
	rm -f "$out"/callgrind."$vp"*
}

# top FILE N: the N functions of callgrind's FILE that miss the most lines
# of code a request, and the lines missed by whose code.
top() {
	callgrind_annotate --auto=no --show=Ir,I1mr --sort=I1mr --threshold=100 "$1" 2>/dev/null | awk -v n="$N" -v top="$2" '
		/file:function/ { on = 1; next }
		!on || !/:/ { next }
		{
			gsub(/\([^)]*%\)/, "")
			if ($2 == ".") $2 = 0
			ir = $1; miss = $2; gsub(",", "", ir); gsub(",", "", miss)
			fn = $3; sub(/^[^:]*:/, "", fn); gsub(/\047[0-9]+/, "", fn)
			owner = fn ~ /^github.com\/rotor-lb\/rotor\// ? "rotor" : fn ~ /^(runtime\.|internal\/runtime\/|internal\/chacha8rand\.)/ ? "runtime" : "other"
			sub(/^github.com\/rotor-lb\/rotor\//, "", fn)
			lines[fn] += miss / n; instr[fn] += ir / n; by[owner] += miss / n
		}
		END {
			printf "# code lines missed a request, by whose code: rotor %.0f, Go runtime %.0f, the rest %.0f\n", by["rotor"], by["runtime"], by["other"]
			printf "%10s %10s  %s\n", "code lines", "instr", "function"
			fflush()
			for (f in lines) printf "%10.1f %10.0f  %s\n", lines[f], instr[f], f | "sort -rn | head -" top
		}'
}

[ "${HAPROXY:-0}" = 1 ] && { needs haproxy; haproxy_config 18600 19601 19602 19603; }
echo "# user-space instructions a request (callgrind), $N requests after 3,000, h2load --h1 -c 50; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note)"
echo "# base $(git rev-parse --short "$BASE"), new: the working tree on $(git rev-parse --short HEAD)"
echo "# code and data misses: the lines a request missed in callgrind's model of 32 KiB first-level caches"
printf "%-22s %10s %10s %8s %12s %12s %12s %12s\n" request base new ratio "code base" "code new" "data base" "data new"
for kind in get post; do
	read -r b bi bd <<<"$(count "$kind" "$out/rotor-base" serve --config "$out/rotor.yaml")"
	k=
	[ "${TOP:-0}" -gt 0 ] && [ "$kind" = get ] && k="$out/new-get.callgrind"
	read -r n ni nd <<<"$(keep=$k count "$kind" "$out/rotor-new" serve --config "$out/rotor.yaml")"
	name="GET"
	[ "$kind" = post ] && name="POST, 100-byte body"
	printf "%-22s %10s %10s %8s %12s %12s %12s %12s\n" "$name" "$b" "$n" "$(awk -v b="$b" -v n="$n" 'BEGIN {printf "%.3f", n / b}')" "$bi" "$ni" "$bd" "$nd"
	if [ "${HAPROXY:-0}" = 1 ]; then
		read -r h hi hd <<<"$(count "$kind" haproxy -f "$out/haproxy-18600.cfg" -db)"
		printf "%-22s %10s %10s %8s %12s %12s %12s %12s\n" "  HAProxy" - "$h" "$(awk -v h="$h" -v n="$n" 'BEGIN {printf "%.3f", n / h}')" - "$hi" - "$hd"
	fi
done
if [ "${TOP:-0}" -gt 0 ]; then
	echo
	echo "# the new build's GET: the $TOP functions missing the most lines of code a request"
	top "$out/new-get.callgrind" "$TOP"
fi
