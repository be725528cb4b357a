#!/usr/bin/env bash
# rotor's placers and health model against the Go libraries people use
# for the same jobs: same keys, same nodes, same settings, in one run.
# bench/libs is a module of its own, so rotor's go.mod gains nothing.
# Usage: bash bench/libs.sh > bench/out/libs.txt
set -euo pipefail
cd "$(dirname "$0")/libs"
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(go version | cut -d' ' -f3)"
echo "# balance: 100,000 keys; max/mean and stddev/mean of keys per node"
go test -count=1 -run TestBalance -v . | sed -n 's/.*BALANCE //p'
echo
echo "# speed: go test -run '^\$' -bench . -benchmem -count ${COUNT:-3}"
go test -run '^$' -bench . -benchmem -count "${COUNT:-3}" . | grep -E '^Benchmark'
