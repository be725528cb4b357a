#!/usr/bin/env bash
# Balancing figures for docs/BENCHMARKS.md: the picker alone and the whole
# Pick+Done cycle through a pool, for every policy at 8, 64 and 1024
# endpoints, on one goroutine and in parallel.
# Usage: bash bench/balance.sh > bench/out/balance.txt
set -euo pipefail
cd "$(dirname "$0")/.."
echo "\$ go test ./balance -run '^\$' -bench 'Picker|PickDone' -benchtime 300ms -count 1"
go test ./balance -run '^$' -bench 'Picker|PickDone' -benchtime 300ms -count 1 | grep -E '^(Benchmark|cpu)'
