#!/usr/bin/env bash
# Placement figures for docs/BENCHMARKS.md: key movement and balance from
# `rotor moves`, lookup and build speed from `go test -bench`.
# Usage: bash bench/placement.sh > bench/out/placement.txt
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
go build -o bench/out/rotor ./cmd/rotor
rotor=bench/out/rotor

names() { # names N: n0,n1,...,n(N-1)
	local out="n0"
	for ((i = 1; i < $1; i++)); do out+=",n$i"; done
	echo "$out"
}

echo "## Movement, one node added, 100000 keys"
for n in 3 10 100; do
	echo
	echo "\$ rotor moves --algo all --from <$n nodes> --to <$((n + 1)) nodes> --keys 100000"
	$rotor moves --algo all --from "$(names $n)" --to "$(names $((n + 1)))" --keys 100000
done
echo
echo "## Movement, one node removed from the middle, 10 -> 9"
echo
echo "\$ rotor moves --algo all --from <n0..n9> --to <n0..n9 without n4> --keys 100000"
$rotor moves --algo all --from "$(names 10)" --to "$(names 10 | sed 's/,n4,/,/')" --keys 100000

echo
echo "## Ring balance against virtual nodes, 10 nodes, 100000 keys (before = 10 nodes)"
for v in 1 10 100 1000; do
	echo
	echo "\$ rotor moves --algo ring --vnodes $v --from <10 nodes> --to <11 nodes>"
	$rotor moves --algo ring --vnodes "$v" --from "$(names 10)" --to "$(names 11)" --keys 100000
done

echo
echo "## Lookup speed"
echo
echo "\$ go test ./placement -run '^\$' -bench 'Owner|Owners3|Bounded|Ring|Maglev' -benchtime 1s -count 1"
go test ./placement -run '^$' -bench 'Owner|Owners3|Bounded|Ring|Maglev' -benchtime 1s -count 1 | grep -E '^(Benchmark|cpu)'
