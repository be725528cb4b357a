#!/usr/bin/env bash
# What a skew between a write's bytes and the socket's pages costs the
# kernel's copy (bench/skew): a source and a sink on core 1, a proxy loop
# on core 0 (GOMAXPROCS=1) moving 4 GiB between them in 256 KiB pieces,
# written plain, framed as HTTP/1.1 chunks read to the buffer's aligned
# start, and framed with the bytes where rawio.ChunkWindow puts them;
# the modes take turns, ROUNDS rounds (default 3). Linux only.
# Usage: bash bench/skew.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs taskset
ROUNDS=${ROUNDS:-3}
setup skew
go build -o "$out/skew" ./bench/skew
taskset -c 1 "$out/skew" source 127.0.0.1:19701 & pids+=($!)
taskset -c 1 "$out/skew" sink 127.0.0.1:19702 & pids+=($!)
sleep 0.5
echo "# 4 GiB in 256 KiB pieces, the proxy loop on core 0, source and sink on core 1; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go version | cut -d' ' -f3)"
for round in $(seq "$ROUNDS"); do
	for mode in plain framed window; do
		GOMAXPROCS=1 taskset -c 0 "$out/skew" proxy 127.0.0.1:19701 127.0.0.1:19702 "$mode"
	done
done
