#!/usr/bin/env bash
# Simulator figures for docs/BENCHMARKS.md: every scenario's table, the
# simulated requests per wall second, memory per request in flight, and
# the wall time of a 10-million-request comparison.
# Usage: bash bench/sim.sh > bench/out/sim.txt
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out docs/img
go build -o bench/out/rotor ./cmd/rotor
rotor=bench/out/rotor
run() {
	echo
	echo "\$ rotor $*"
	$rotor "$@"
}
run sim balance --uniform
run sim balance --slow 0=3 --plot docs/img/sim-balance-slow.svg
run sim balance --uneven --plot docs/img/sim-balance-uneven.svg
run sim balance --hot 0.45
run sim bins --plot docs/img/sim-bins.svg
run sim bins --balls 100000 --choices 1,2,3,4 --trials 5
run sim keys --plot docs/img/sim-keys-add.svg --change add
run sim keys --change remove
run sim keys --change replace
run sim rotation --plot docs/img/sim-rotation.svg
echo
echo "\$ /usr/bin/time -f '%e s wall, %M KiB max RSS' rotor sim balance --servers 16 --requests 10000000 (8 policies, 80M requests)"
/usr/bin/time -f '%e s wall, %M KiB max RSS' -o bench/out/time.txt $rotor sim balance --servers 16 --requests 10000000 >/dev/null 2>&1
cat bench/out/time.txt
echo
echo "\$ go test ./sim -run '^\$' -bench 'SimBalance' -benchtime 2000000x; go test ./sim -run '^\$' -bench Inflight -benchtime 3x"
go test ./sim -run '^$' -bench 'SimBalance' -benchtime 2000000x | grep -E '^Benchmark'
go test ./sim -run '^$' -bench 'Inflight' -benchtime 3x | grep -E '^Benchmark'
