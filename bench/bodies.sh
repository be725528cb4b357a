#!/usr/bin/env bash
# Large bodies through rotor against the backend direct, one run: a 1 GiB
# download with a Content-Length and chunked, the first again as the
# answer to a 100,000-byte POST (which goes net/http's way), and a 1 GiB
# upload with a Content-Length and chunked, each with curl (MB/s, the best of ROUNDS).
# rotor gets one core (taskset -c 0, GOMAXPROCS=1); curl and the backend
# share the other. rotor's CPU time a GiB, from /proc, and how busy the
# other core was (curl's and the backend's) over the direct runs and over
# rotor's tell which core is the limit: when that one is full in both,
# the ratio measures how cheap each makes the backend's and curl's work,
# and swings with what else the machine runs.
# With BASE, a git revision, its rotor runs beside the working tree's (on
# core 0 too, GOMAXPROCS=1): each round runs the backend direct, rotor and
# the base once each, in turns whose order changes every round, and the
# table gives each one's best, and rotor's rate and CPU a GiB over the
# base's round by round (median and range), ROUNDS rounds.
# Needs: curl, taskset (git with BASE).
# Usage: bash bench/bodies.sh [BASE] > bench/out/bodies.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs curl taskset
SIZE=${SIZE:-1073741824}
ROUNDS=${ROUNDS:-3}
BASE=${1:-}
setup bodies
if [ -n "$BASE" ]; then
	build_base "$BASE"
fi

upload=$(mktemp -p /dev/shm rotor-upload.XXXXXX 2>/dev/null || mktemp)
tmpfiles+=("$upload")
head -c "$SIZE" /dev/zero > "$upload"
# A request body over 64 KiB sends the request net/http's way, and its
# answer comes back that way too.
small=$(mktemp -p /dev/shm rotor-small.XXXXXX 2>/dev/null || mktemp)
tmpfiles+=("$small")
head -c 100000 /dev/zero > "$small"

taskset -c 1 "$out/upstream" 127.0.0.1:19401 & pids+=($!)
cat > "$out/rotor.yaml" <<YAML
admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:18400", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "http://127.0.0.1:19401"}], timeouts: {try: 10m, total: 10m}}]
YAML
GOMAXPROCS=1 taskset -c 0 "$out/rotor" serve --config "$out/rotor.yaml" 2>"$out/rotor.log" & pids+=($!)
rotor_pid=$!
ports="19401 18400"
if [ -n "$BASE" ]; then
	sed 's/18400/18401/' "$out/rotor.yaml" > "$out/base.yaml"
	GOMAXPROCS=1 taskset -c 0 "$out/rotor-base" serve --config "$out/base.yaml" 2>"$out/base.log" & pids+=($!)
	base_pid=$!
	ports+=" 18401"
fi
hz=$(getconf CLK_TCK)
for port in $ports; do
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.05; done
done

# best prints the best of ROUNDS curl runs on core 1, in MB/s.
best() { curl_best 1 "$ROUNDS" "$@"; }

# gib_cpu TICKS RUNS: CPU seconds a GiB from clock ticks over RUNS runs.
gib_cpu() { awk -v t="$1" -v hz="$hz" -v n="$2" -v size="$SIZE" 'BEGIN {printf "%.2f", t / hz / n / (size / 1073741824)}'; }

if [ -n "$BASE" ]; then
	echo "# 1 GiB bodies, MB/s (best of $ROUNDS rounds taking turns), rotor and base each on core 0; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go version | cut -d' ' -f3)"
	echo "# rotor: the working tree on $(git rev-parse --short HEAD); base: $BASE; new/base: rotor over the base round by round, median (range)"
	printf "%-26s %8s %8s %8s %8s %20s %12s %20s\n" body direct rotor base "/direct" "rate new/base" "CPU s/GiB" "CPU new/base"
	row() {
		local name=$1 path=$2 round d r b tr tb rates=() cpus=() rs=() bs=() ds=() cr=0 cb=0
		shift 2
		for round in $(seq "$ROUNDS"); do
			for target in $(if ((round % 2)); then echo direct rotor base; else echo base rotor direct; fi); do
				case $target in
				direct) ds+=("$(curl_best 1 1 "$@" "http://127.0.0.1:19401$path")") ;;
				rotor)
					t0=$(cpu_ticks "$rotor_pid")
					r=$(curl_best 1 1 "$@" "http://127.0.0.1:18400$path")
					tr=$(($(cpu_ticks "$rotor_pid") - t0))
					;;
				base)
					t0=$(cpu_ticks "$base_pid")
					b=$(curl_best 1 1 "$@" "http://127.0.0.1:18401$path")
					tb=$(($(cpu_ticks "$base_pid") - t0))
					;;
				esac
			done
			rs+=("$r") bs+=("$b") cr=$((cr + tr)) cb=$((cb + tb))
			rates+=("$(awk -v r="$r" -v b="$b" 'BEGIN {printf "%.2f", r / b}')")
			cpus+=("$(awk -v r="$tr" -v b="$tb" 'BEGIN {printf "%.2f", b ? r / b : 0}')")
		done
		d=$(printf '%s\n' "${ds[@]}" | sort -g | tail -1)
		r=$(printf '%s\n' "${rs[@]}" | sort -g | tail -1)
		b=$(printf '%s\n' "${bs[@]}" | sort -g | tail -1)
		printf "%-26s %8s %8s %8s %8s %20s %12s %20s\n" "$name" "$d" "$r" "$b" \
			"$(awk -v d="$d" -v r="$r" 'BEGIN {printf "%.2fx", r / d}')" \
			"$(echo "${rates[*]}" | median)x ($(printf '%s\n' "${rates[@]}" | sort -g | head -1)-$(printf '%s\n' "${rates[@]}" | sort -g | tail -1))" \
			"$(gib_cpu "$cr" "$ROUNDS")/$(gib_cpu "$cb" "$ROUNDS")" \
			"$(echo "${cpus[*]}" | median)x ($(printf '%s\n' "${cpus[@]}" | sort -g | head -1)-$(printf '%s\n' "${cpus[@]}" | sort -g | tail -1))"
	}
	row "download, Content-Length" "/bytes/$SIZE"
	row "download, chunked" "/bytes/$SIZE?chunked=1"
	row "download, net/http's way" "/bytes/$SIZE" -X POST --data-binary @"$small"
	row "upload, Content-Length" /sink -X POST -T "$upload"
	row "upload, chunked" /sink -X POST -T "$upload" -H "Transfer-Encoding: chunked"
	exit 0
fi

echo "# 1 GiB bodies, MB/s (best of $ROUNDS), rotor on one core; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go version | cut -d' ' -f3)"
echo "# rotor CPU: its user and system time a GiB over its runs (1.00 s would be its core full at 1,074 MB/s)"
printf "%-26s %10s %10s %8s %16s %18s\n" body direct rotor ratio "rotor CPU s/GiB" "core 1 busy d/r %"
row() {
	local name=$1 path=$2
	shift 2
	c0=$(core_ticks 1)
	d=$(best "$@" "http://127.0.0.1:19401$path")
	c1=$(core_ticks 1)
	t0=$(cpu_ticks "$rotor_pid")
	r=$(best "$@" "http://127.0.0.1:18400$path")
	c2=$(core_ticks 1)
	cpu=$(gib_cpu "$(($(cpu_ticks "$rotor_pid") - t0))" "$ROUNDS")
	printf "%-26s %10s %10s %8s %16s %18s\n" "$name" "$d" "$r" "$(awk -v d="$d" -v r="$r" 'BEGIN {printf "%.2fx", r / d}')" "$cpu" \
		"$(core_busy "$c0" "$c1")/$(core_busy "$c1" "$c2")"
}
row "download, Content-Length" "/bytes/$SIZE"
row "download, chunked" "/bytes/$SIZE?chunked=1"
row "download, net/http's way" "/bytes/$SIZE" -X POST --data-binary @"$small"
row "upload, Content-Length" /sink -X POST -T "$upload"
row "upload, chunked" /sink -X POST -T "$upload" -H "Transfer-Encoding: chunked"
