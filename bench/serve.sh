#!/usr/bin/env bash
# Reverse-proxy throughput on loopback: wrk against three local backends
# directly, through rotor, Caddy, nginx and HAProxy, in one run.
# Each proxy gets one core (taskset -c 0, one worker or thread, GOMAXPROCS=1);
# wrk and the backends share the other core. The peers send the backends
# the forwarding fields rotor sends (FORWARDED, bench/setup.sh).
# Needs: wrk, nginx, haproxy, caddy, taskset (Debian: wrk nginx-light haproxy caddy util-linux).
# Usage: bash bench/serve.sh > bench/out/serve.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk nginx haproxy caddy taskset
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
setup serve


taskset -c 1 "$out/upstream" 127.0.0.1:19101 127.0.0.1:19102 127.0.0.1:19103 & pids+=($!)

web_config "$out/rotor.yaml" 127.0.0.1:18100 19101 19102 19103
GOMAXPROCS=1 taskset -c 0 "$out/rotor" serve --config "$out/rotor.yaml" 2>"$out/rotor.log" & pids+=($!)

nginx_proxy 0 18101 19101 19102 19103
haproxy_proxy 0 18102 19101 19102 19103

cat > "$out/Caddyfile" <<CADDY
{
	admin off
	auto_https off
}
http://127.0.0.1:18103 {
	reverse_proxy 127.0.0.1:19101 127.0.0.1:19102 127.0.0.1:19103 {
		lb_policy round_robin
		$caddy_fwd
	}
}
CADDY
GOMAXPROCS=1 taskset -c 0 caddy run --config "$out/Caddyfile" --adapter caddyfile >"$out/caddy.log" 2>&1 & pids+=($!)

for port in 19101 18100 18101 18102 18103; do
	for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
done

. bench/wrk.sh
forwarding_note
wrk_header
for target in "direct (one backend)=19101" "rotor=18100" "caddy=18103" "nginx=18101" "haproxy=18102"; do
	wrk_row "${target%=*}" "${target#*=}"
done
