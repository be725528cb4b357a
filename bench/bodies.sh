#!/usr/bin/env bash
# Large bodies through rotor against the backend direct, one run: a 1 GiB
# download with a Content-Length and chunked, and a 1 GiB upload with a
# Content-Length and chunked, each with curl (MB/s, the best of ROUNDS).
# rotor gets one core (taskset -c 0, GOMAXPROCS=1); curl and the backend
# share the other. rotor's CPU time a GiB, from /proc, and how busy the
# other core was (curl's and the backend's) over the direct runs and over
# rotor's tell which core is the limit: when that one is full in both,
# the ratio measures how cheap each makes the backend's and curl's work,
# and swings with what else the machine runs.
# Needs: curl, taskset. Usage: bash bench/bodies.sh > bench/out/bodies.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs curl taskset
SIZE=${SIZE:-1073741824}
ROUNDS=${ROUNDS:-3}
setup bodies

upload=$(mktemp -p /dev/shm rotor-upload.XXXXXX 2>/dev/null || mktemp)
tmpfiles+=("$upload")
head -c "$SIZE" /dev/zero > "$upload"

taskset -c 1 "$out/upstream" 127.0.0.1:19401 & pids+=($!)
cat > "$out/rotor.yaml" <<YAML
admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "127.0.0.1:18400", pool: app}]
pools: [{name: app, endpoints: [{name: a, url: "http://127.0.0.1:19401"}], timeouts: {try: 10m, total: 10m}}]
YAML
GOMAXPROCS=1 taskset -c 0 "$out/rotor" serve --config "$out/rotor.yaml" 2>"$out/rotor.log" & pids+=($!)
rotor_pid=$!
hz=$(getconf CLK_TCK)
for port in 19401 18400; do
	for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.05; done
done

# best prints the best of ROUNDS curl runs on core 1, in MB/s.
best() { curl_best 1 "$ROUNDS" "$@"; }

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
	cpu=$(awk -v t="$(($(cpu_ticks "$rotor_pid") - t0))" -v hz="$hz" -v n="$ROUNDS" -v size="$SIZE" 'BEGIN {printf "%.2f", t / hz / n / (size / 1073741824)}')
	printf "%-26s %10s %10s %8s %16s %18s\n" "$name" "$d" "$r" "$(awk -v d="$d" -v r="$r" 'BEGIN {printf "%.2fx", r / d}')" "$cpu" \
		"$(core_busy "$c0" "$c1")/$(core_busy "$c1" "$c2")"
}
row "download, Content-Length" "/bytes/$SIZE"
row "download, chunked" "/bytes/$SIZE?chunked=1"
row "upload, Content-Length" /sink -X POST -T "$upload"
row "upload, chunked" /sink -X POST -T "$upload" -H "Transfer-Encoding: chunked"
