#!/usr/bin/env bash
# The long reliability suite and long fuzzing, for docs/RELIABILITY.md:
# the reliability checks at their long sizes (ROTOR_LONG=1: more load,
# longer runs, 5,000 connections and 10,000 idle keep-alive clients),
# then every fuzz target for FUZZTIME
# (10 minutes each by default). Figures go to bench/out/reliability.txt,
# one "check | figure" line each; fuzzing's last lines follow.
# Needs what scripts/test.sh installs (tinyproxy, microsocks).
# Usage: bash bench/reliability.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/out
mkdir -p "$out"
report="$PWD/$out/reliability.txt"
: > "$report"
echo "# ROTOR_LONG=1 go test ./reliability -count=1 -v -timeout 60m" >> "$report"
ROTOR_LONG=1 ROTOR_FIGURES="$report" go test ./reliability -count=1 -v -timeout 60m | grep -E '^(--- |FAIL|ok)'
fuzztime=${FUZZTIME:-10m}
for target in $(grep -v '^#' scripts/fuzz-targets); do
	echo "# go test ./${target%%:*} -run '^\$' -fuzz '^${target##*:}\$' -fuzztime $fuzztime" >> "$report"
	go test "./${target%%:*}" -run '^$' -fuzz "^${target##*:}\$" -fuzztime "$fuzztime" 2>&1 | tail -3 | tee -a "$report"
done
