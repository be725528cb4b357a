#!/usr/bin/env bash
# The CPU profile rotor is built with (profile-guided optimisation:
# `go build` reads cmd/rotor/default.pgo by itself). rotor, built without
# one, serves each path of bench/compare.sh in turn on one core
# (GOMAXPROCS=1, core 0; the load and three bench/upstream backends on
# core 1) with `rotor serve --cpu-profile`: HTTP/1.1 GETs and POSTs of
# 100-byte bodies through an http listener, GETs through a forward
# listener and through a tcp listener (wrk -c 50), HTTP/2 over TLS (h2load
# -c 20 -m 10), and, when redis-server is there, redis-benchmark through
# a tcp listener. The profile of the whole run is written to
# cmd/rotor/default.pgo. Run it again when the hot paths change; a
# profile a little out of date still helps (Go matches it to the code by
# function and line offset), and is never wrong, only less useful.
# Needs: wrk, h2load, openssl, taskset (redis-server and
# redis-benchmark for the redis part).
# Usage: bash bench/pgo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk h2load openssl taskset
DURATION=${DURATION:-5s}
setup pgo -pgo=off
selfsigned

taskset -c 1 "$out/upstream" 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303 & pids+=($!)
redis=0
if command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null; then
	redis=1
	start_redis 1 19379
fi
paths_config "$out/rotor.yaml" 18600
GOMAXPROCS=1 taskset -c 0 "$out/rotor" serve --config "$out/rotor.yaml" --cpu-profile "$out/cpu.pprof" 2>"$out/rotor.log" &
rotor=$!
pids+=($rotor)
for port in 19301 18600 18601 18602 18603; do
	wait_port "$port"
done

wrk_scripts
load() { taskset -c 1 "$@" >"$out/load.txt" || { cat "$out/load.txt" >&2; exit 1; }; }
load wrk -t1 -c50 -d"$DURATION" http://127.0.0.1:18600/
load wrk -t1 -c50 -d"$DURATION" -s "$out/post.lua" http://127.0.0.1:18600/
load wrk -t1 -c50 -d"$DURATION" -s "$out/forward.lua" http://127.0.0.1:18602/
load wrk -t1 -c50 -d"$DURATION" http://127.0.0.1:18601/
load h2load -n 100000 -c 20 -m 10 https://127.0.0.1:18603/
if [ "$redis" = 1 ]; then
	load redis-benchmark -p 18604 -n 200000 -c 50 -t set,get -q
fi
kill -TERM "$rotor"
wait "$rotor" || true
cp "$out/cpu.pprof" cmd/rotor/default.pgo
echo "cmd/rotor/default.pgo: $(go tool pprof -raw "$out/rotor" cmd/rotor/default.pgo 2>/dev/null | awk '/^Samples:/ {s = 1; next} /^Locations/ {s = 0} s && /^ *[0-9]+ +[0-9]+:/ {n += $1} END {print n}') samples"
