#!/usr/bin/env bash
# rotor beside nginx, HAProxy and Caddy (and the backend direct), in one
# run, for what bench/serve.sh does not cover:
#   TCP: redis-benchmark SET/GET through each TCP proxy (rotor's tcp
#        listener, HAProxy mode tcp, nginx stream), plain and pipelined -P 16
#   HTTP/2 over TLS: h2load -c 20 -m 10 through each (rotor, nginx,
#        HAProxy, Caddy), to HTTP/1.1 backends
# Each proxy gets one core (taskset -c 0, one worker or thread,
# GOMAXPROCS=1); the load generator and the backends share the other.
# CORES=2 gives each proxy both cores (two workers or threads,
# GOMAXPROCS=2), shared with the load, to show how each scales.
# HTTP/1.1 is bench/serve.sh's. Installs what is missing (Debian).
# Usage: bash bench/peers.sh > bench/out/peers.txt
#        CORES=2 bash bench/peers.sh > bench/out/peers-2.txt
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pair in nginx:nginx-light haproxy:haproxy caddy:caddy h2load:nghttp2-client redis-benchmark:redis-tools \
	redis-server:redis-server openssl:openssl taskset:util-linux; do
	command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
done
[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || need+=(libnginx-mod-stream)
if ((${#need[@]})); then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "installing: ${need[*]}" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

REQUESTS=${REQUESTS:-200000}
CORES=${CORES:-1}
case "$CORES" in
1) pin=0 load=1 ;;
2) pin=0,1 load=0,1 ;;
*) echo "CORES must be 1 or 2" >&2; exit 1 ;;
esac
. bench/setup.sh
setup peers

wait_port() {
	for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
	echo "nothing listens on $1" >&2
	return 1
}

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" \
	-keyout "$out/key.pem" -out "$out/cert.pem" 2>/dev/null
cat "$out/cert.pem" "$out/key.pem" > "$out/both.pem"

taskset -c $load redis-server --bind 127.0.0.1 --port 19379 --save "" --appendonly no --loglevel warning >"$out/redis.log" & pids+=($!)
taskset -c $load "$out/upstream" 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303 & pids+=($!)

cat > "$out/rotor.yaml" <<YAML
admin: {listen: "off"}
listeners:
  - {name: redis, kind: tcp, listen: "127.0.0.1:18379", pool: redis}
  - {name: h2, kind: http, listen: "127.0.0.1:18443", pool: app, tls: {cert: cert.pem, key: key.pem}}
pools:
  - {name: redis, endpoints: [{name: r, address: "127.0.0.1:19379"}]}
  - name: app
    endpoints:
      - {name: a, url: "http://127.0.0.1:19301"}
      - {name: b, url: "http://127.0.0.1:19302"}
      - {name: c, url: "http://127.0.0.1:19303"}
YAML
GOMAXPROCS=$CORES taskset -c $pin "$out/rotor" serve --config "$out/rotor.yaml" 2>"$out/rotor.log" & pids+=($!)

cat > "$out/nginx.conf" <<NGINX
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes $CORES;
daemon off;
pid $PWD/$out/nginx.pid;
error_log $PWD/$out/nginx.err warn;
events { worker_connections 4096; }
stream {
  server { listen 127.0.0.1:18380; proxy_pass 127.0.0.1:19379; }
}
http {
  access_log off;
  upstream app { server 127.0.0.1:19301; server 127.0.0.1:19302; server 127.0.0.1:19303; keepalive 128; }
  server {
    listen 127.0.0.1:18444 ssl http2;
    keepalive_requests 100000000;
    ssl_certificate $PWD/$out/cert.pem;
    ssl_certificate_key $PWD/$out/key.pem;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGINX
taskset -c $pin nginx -c "$PWD/$out/nginx.conf" -p "$PWD/$out" & pids+=($!)

cat > "$out/haproxy.cfg" <<HAPROXY
global
  nbthread $CORES
defaults
  timeout connect 2s
  timeout client 30s
  timeout server 30s
frontend redis
  mode tcp
  bind 127.0.0.1:18381
  default_backend redis
backend redis
  mode tcp
  server r 127.0.0.1:19379
frontend h2
  mode http
  bind 127.0.0.1:18445 ssl crt $PWD/$out/both.pem alpn h2,http/1.1
  default_backend app
backend app
  mode http
  balance roundrobin
  http-reuse always
  server a 127.0.0.1:19301
  server b 127.0.0.1:19302
  server c 127.0.0.1:19303
HAPROXY
taskset -c $pin haproxy -f "$out/haproxy.cfg" -db >"$out/haproxy.log" 2>&1 & pids+=($!)

cat > "$out/Caddyfile" <<CADDY
{
	admin off
	auto_https off
}
https://127.0.0.1:18446 {
	tls $PWD/$out/cert.pem $PWD/$out/key.pem
	reverse_proxy 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303 {
		lb_policy round_robin
	}
}
CADDY
GOMAXPROCS=$CORES taskset -c $pin caddy run --config "$out/Caddyfile" --adapter caddyfile >"$out/caddy.log" 2>&1 & pids+=($!)

for port in 19379 19301 18379 18380 18381 18443 18444 18445 18446; do wait_port "$port"; done

echo "# rotor beside its peers, $CORES core(s) each (taskset -c $pin; load on $load); $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(go version | cut -d' ' -f3)"
echo "# $(nginx -v 2>&1 | cut -d' ' -f3); $(haproxy -v | head -1 | cut -d' ' -f1-3); caddy $(caddy version | cut -d' ' -f1); $(redis-server --version | cut -d' ' -f1-3)"
echo
# rps runs redis-benchmark -q and prints its SET and GET requests/s.
rps() { "$@" | tr '\r' '\n' | awk '/requests per second/ {print $2}' | paste -sd' '; }
echo "## TCP: redis-benchmark -n $REQUESTS -c 50 -t set,get (requests/s), load on cores $load"
printf "%-10s %12s %12s %14s %14s\n" target SET GET "SET -P 16" "GET -P 16"
for target in direct=19379 rotor=18379 nginx=18380 haproxy=18381; do
	port=${target#*=}
	plain=$(rps taskset -c $load redis-benchmark -p "$port" -n "$REQUESTS" -c 50 -t set,get -q)
	piped=$(rps taskset -c $load redis-benchmark -p "$port" -n "$((REQUESTS * 5))" -c 50 -P 16 -t set,get -q)
	printf "%-10s %12s %12s %14s %14s\n" "${target%=*}" $plain $piped
done
echo
echo "## HTTP/2 over TLS: h2load -n $REQUESTS -c 20 -m 10, load on cores $load"
printf "%-10s %12s %10s %10s\n" target "requests/s" "mean" "max"
for target in rotor=18443 nginx=18444 haproxy=18445 caddy=18446; do
	port=${target#*=}
	taskset -c $load h2load -t "$CORES" -n "$REQUESTS" -c 20 -m 10 "https://127.0.0.1:$port/" > "$out/h2load-$port.txt" 2>&1 || true
	rps=$(awk '/^finished in/ {print $4}' "$out/h2load-$port.txt")
	lat=$(awk '/^time for request:/ {print $6, $5}' "$out/h2load-$port.txt")
	ok=$(awk '/^status codes:/ {print $3, $4}' "$out/h2load-$port.txt")
	printf "%-10s %12s %10s %10s  %s\n" "${target%=*}" "$rps" $lat "($ok)"
done
