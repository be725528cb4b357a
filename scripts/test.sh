#!/usr/bin/env bash
# Runs rotor's whole test suite on a fresh machine: installs the outside
# programs the integration tests run against, then gofmt, go vet,
# go test -race over every package (the reliability suite's short version
# among them), and each fuzz target for a few seconds over its committed
# corpus. CI runs exactly this (.ci/run). The long reliability suite and
# ten-minute fuzzing: bash bench/reliability.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

# need CMD PKG: install Debian package PKG unless CMD is already on PATH.
missing=()
need() {
	command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}
need python3 python3    # the reference ring of article 000 (placement tests)
need c++ g++            # the jump hash paper's C++ code (placement tests)
need tinyproxy tinyproxy   # an HTTP proxy as a route (forward proxy tests)
need microsocks microsocks # a SOCKS5 proxy as a route (forward proxy tests)
need redis-server redis-server # the shared state store (shared, reliability tests)
need chromium chromium     # a real browser for the web pages (rotor web, the admin's /ui)

if ((${#missing[@]})); then
	sudo=""
	if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
	echo "installing: ${missing[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# h2spec, the HTTP/2 conformance suite (proxy/h2's tests run it), is a Go
# program: from the module proxy, at a fixed version.
export PATH="$PATH:$(go env GOPATH)/bin"
if ! command -v h2spec >/dev/null 2>&1; then
	echo "installing: h2spec"
	go install github.com/summerwind/h2spec/cmd/h2spec@v2.2.1+incompatible
fi

# Every package is tested as rotor is built: with its CPU profile
# (cmd/rotor/default.pgo, from bench/pgo.sh), which go build applies to
# cmd/rotor by itself. Named for every test binary, it also keeps each
# package from being compiled twice, with the profile and without. (A
# flag, not GOFLAGS, whose values cannot hold the spaces a checkout's
# path may have.)
pgo=("-pgo=$PWD/cmd/rotor/default.pgo")

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt: these files are not formatted:" >&2
	echo "$unformatted" >&2
	exit 1
fi
go vet ./...
# rotor and its tests build for macOS and Windows too: there the raw
# socket ways (rawio, the epoll relay loop) give way to the net package's.
GOOS=darwin go vet ./...
GOOS=windows go vet ./...
go test "${pgo[@]}" -race -count=1 -timeout 15m ./...
# The race detector shuffles the scheduler's order on purpose: what holds
# an order the scheduler is given runs once more without it.
go test "${pgo[@]}" -count=1 -run 'TestReadyQueueWakesInOrder|TestTogetherLetsTheTurnRunFirst' ./proxy/h1
# The proxies once more as they run where there is no raw socket access
# (Windows): net/http's server and transport, a goroutine's copy.
go test "${pgo[@]}" -race -count=1 -timeout 5m -tags norawio ./proxy/... ./server

# Every fuzz target, briefly: its corpus (testdata/fuzz) and 20,000 new
# inputs (a few seconds each). A count, not a duration: Go 1.26's fuzzing
# coordinator can fail a run bounded by time at its very end with
# "context deadline exceeded" and no failing input (go.dev/issue/75804),
# which would redden CI for nothing. FUZZTIME=10m is the long suite's.
fuzztime=${FUZZTIME:-20000x}
for target in $(grep -v '^#' scripts/fuzz-targets); do
	go test "${pgo[@]}" "./${target%%:*}" -run '^$' -fuzz "^${target##*:}\$" -fuzztime "$fuzztime"
done
