#!/usr/bin/env bash
# Forward-proxy overhead on loopback: wrk sends absolute-URI GETs through
# rotor's forward listener (one direct route) and through tinyproxy, next to
# the backend fetched directly, in one run. Each proxy gets one core
# (taskset -c 0; GOMAXPROCS=1 for rotor); wrk and the backend share the other.
# Needs: wrk, tinyproxy, nc, taskset (Debian: wrk tinyproxy netcat-openbsd util-linux).  Usage: bash bench/forward.sh > bench/out/forward.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk tinyproxy taskset
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
setup forward
chmod 777 "$out"

taskset -c 1 "$out/upstream" 127.0.0.1:19201 & pids+=($!)
cat > "$out/rotor.yaml" <<YAML
admin: {listen: "off"}
listeners: [{name: out, kind: forward, listen: "127.0.0.1:18200", pool: routes, allow_targets: [127.0.0.0/8]}]
pools: [{name: routes, endpoints: [{name: direct, url: "direct://"}]}]
YAML
GOMAXPROCS=1 taskset -c 0 "$out/rotor" serve --config "$out/rotor.yaml" 2>"$out/rotor.log" & pids+=($!)
cat > "$out/tinyproxy.conf" <<TINY
Port 18201
Listen 127.0.0.1
Timeout 30
Allow 127.0.0.1
MaxClients 1000
LogLevel Error
DisableViaHeader Yes
LogFile "$PWD/$out/tinyproxy.log"
User nobody
Group nogroup
TINY
taskset -c 0 tinyproxy -d -c "$out/tinyproxy.conf" & pids+=($!)
cat > "$out/proxied.lua" <<'LUA'
wrk.path = "http://127.0.0.1:19201/"
wrk.headers["Host"] = "127.0.0.1:19201"
LUA
for port in 19201 18200 18201; do
	for _ in $(seq 50); do nc -z 127.0.0.1 "$port" 2>/dev/null && break; sleep 0.1; done
done
echo "absolute-URI GETs through the proxies"
. bench/wrk.sh
wrk_header
wrk_row direct 19201
wrk_row "rotor forward" 18200 -s "$out/proxied.lua"
wrk_row tinyproxy 18201 -s "$out/proxied.lua"
