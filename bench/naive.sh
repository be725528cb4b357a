#!/usr/bin/env bash
# What net/http costs without rotor, in one run: wrk (-t1 -c50, core 1)
# through rotor and through a bare httputil.ReverseProxy (bench/naive),
# on http.Transport and on a synchronous transport (-sync), each with one
# core (GOMAXPROCS=1, core 0) and with two (GOMAXPROCS=2, cores 0-1,
# shared with wrk and the backends). ROUNDS rounds, the targets taking
# turns; each line is one run.
# Needs: wrk, taskset.
# Usage: bash bench/naive.sh > bench/out/naive.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk taskset
DURATION=${DURATION:-6s}
ROUNDS=${ROUNDS:-3}
setup naive
go build -o "$out/naive" ./bench/naive

taskset -c 1 "$out/upstream" 127.0.0.1:19501 127.0.0.1:19502 127.0.0.1:19503 & pids+=($!)
web_config "$out/rotor.yaml" 127.0.0.1:18500 19501 19502 19503
for _ in $(seq 50); do curl -sf http://127.0.0.1:19501/ >/dev/null && break; sleep 0.1; done

# run NAME CORES CMD... starts CMD on 18500 with CORES cores and prints wrk's requests/s.
run() {
	local name=$1 cores=$2 pin=0
	shift 2
	[ "$cores" = 2 ] && pin=0,1
	GOMAXPROCS=$cores taskset -c $pin "$@" 2>/dev/null &
	local p=$!
	for _ in $(seq 50); do curl -sf http://127.0.0.1:18500/ >/dev/null && break; sleep 0.1; done
	printf "%-22s %5s %12s\n" "$name" "$cores" "$(taskset -c 1 wrk -t1 -c50 -d"$DURATION" http://127.0.0.1:18500/ | awk '/Requests\/sec/ {print $2}')"
	kill "$p"
	wait "$p" 2>/dev/null || true
}
backends="127.0.0.1:19501 127.0.0.1:19502 127.0.0.1:19503"
echo "# wrk -t1 -c50 -d$DURATION (core 1), $ROUNDS rounds taking turns; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
printf "%-22s %5s %12s\n" target cores "requests/s"
for round in $(seq "$ROUNDS"); do
	for cores in 1 2; do
		run rotor "$cores" "$out/rotor" serve --config "$out/rotor.yaml"
		# shellcheck disable=SC2086
		run "httputil" "$cores" "$out/naive" 127.0.0.1:18500 $backends
		# shellcheck disable=SC2086
		run "httputil, sync" "$cores" "$out/naive" -sync 127.0.0.1:18500 $backends
	done
done
