#!/usr/bin/env bash
# rotor beside nginx, HAProxy and Caddy (and the backend direct), in one
# run, on every path:
#   HTTP/1.1: wrk -t1 -c50 through each, three backends; GETs, and POSTs
#        of 100-byte bodies
#   TCP: redis-benchmark SET/GET through each TCP proxy (rotor's tcp
#        listener, HAProxy mode tcp, nginx stream), plain and pipelined -P 16
#   HTTP/2 over TLS: h2load -c 20 -m 10 through each, to HTTP/1.1 backends
#   large bodies: curl downloads and uploads of SIZE bytes (default 256 MiB)
#        through each, with a Content-Length and chunked
# Each proxy gets one core (taskset -c 0, one worker or thread,
# GOMAXPROCS=1); the load generator and the backends share the other.
# CORES=2 gives each proxy both cores (two workers or threads,
# GOMAXPROCS=2), shared with the load, to show how each scales. rotor
# runs as it would be run, with no GOMAXPROCS set: Go counts the cores
# taskset gives it, and rotor may run on fewer while they are full
# (internal/procs).
# Installs what is missing (Debian). Prints the tables; the results also
# go to bench/out/peers/results.tsv and, drawn relative to HAProxy, to
# bench/out/peers/peers-${CORES}core.svg. WRITE=1 puts the tables into
# docs/BENCHMARKS.md too, between the markers for this core count, and
# the chart into docs/img.
# For HTTP/1.1, TCP and HTTP/2 each proxy's CPU time a request is printed
# too (from /proc), and charted as requests per CPU second: when the
# load's core is the limit, the rates draw level and the CPU still tells
# them apart.
# TESTS picks some of the tests (default "get post bound tcp h2 bodies":
# those the tables in docs/BENCHMARKS.md hold); WRITE=1 needs them all.
# "bound" is HTTP/1.1 GETs to three backends that nginx answers from
# memory: the Go backends of "get" leave the load's core the limit and
# each proxy's core a quarter idle, these make the proxy's core the
# limit, so that the rate and the tail are the proxy's own. One more
# runs only when asked for: "tls", HTTP/1.1 over TLS (wrk to each
# proxy's TLS listener; wrk offers no ALPN, so each serves it HTTP/1.1);
# and "h2c", HTTP/2 without TLS (h2load with prior knowledge to the
# cleartext listeners of "get", and to one of nginx's own, which serves
# HTTP/2 alone there).
# ROUNDS=3 runs HTTP/1.1 (GET and POST), TCP and HTTP/2 three times, the targets taking
# turns in a different order each round, and prints each figure's median:
# this machine's speed swings by a quarter from minute to minute.
# FORWARDED=1 (the default) has nginx, HAProxy and Caddy send the
# backends the four fields rotor adds to every request (X-Forwarded-For,
# X-Forwarded-Host, X-Forwarded-Proto, X-Real-Ip), as a reverse proxy's
# config usually has them do, so that the backends parse as much from
# each: four lines cost this machine's Go backends 1-1.7 us a request,
# on the core the load shares with them. FORWARDED=0 runs the peers bare
# (the figures before 2026-12-03 17:11Z were). bench/setup.sh holds the
# peers' settings for them, which tail.sh and serve.sh use too.
# Usage: bash bench/peers.sh > bench/out/peers.txt
#        CORES=2 WRITE=1 bash bench/peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pair in nginx:nginx-light haproxy:haproxy caddy:caddy h2load:nghttp2-client redis-benchmark:redis-tools \
	redis-server:redis-server openssl:openssl taskset:util-linux wrk:wrk curl:curl; do
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
DURATION=${DURATION:-10s}
CONNS=${CONNS:-50}
SIZE=${SIZE:-268435456}
ROUNDS=${ROUNDS:-1}
TESTS=${TESTS:-get post bound tcp h2 bodies}
for t in $TESTS; do
	case $t in get | post | tcp | h2 | h2c | tls | bound | bodies) ;; *) echo "TESTS: $t is not a test (get post tcp h2 h2c tls bound bodies)" >&2; exit 1 ;; esac
done
if [ "${WRITE:-}" = 1 ] && [ "$(echo $TESTS | tr ' ' '\n' | sort | paste -sd' ')" != "bodies bound get h2 post tcp" ]; then
	echo "WRITE=1 writes the tables of docs/BENCHMARKS.md: it needs TESTS to be get post bound tcp h2 bodies" >&2
	exit 1
fi
# want TEST: TEST is among those picked.
want() { [[ " $TESTS " == *" $1 "* ]]; }
. bench/setup.sh
pin_cores
setup peers

selfsigned
cat "$out/cert.pem" "$out/key.pem" > "$out/both.pem"

start_redis "$load" 19379
taskset -c $load "$out/upstream" 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303 & pids+=($!)
# The backends of "bound": nginx answering from memory, one worker on the
# load's cores.
nginx_backends "$load" 19311 19312 19313

cat > "$out/rotor.yaml" <<YAML
admin: {listen: "off"}
listeners:
  - {name: redis, kind: tcp, listen: "127.0.0.1:18379", pool: redis}
  - {name: h2, kind: http, listen: "127.0.0.1:18443", pool: app, tls: {cert: cert.pem, key: key.pem}}
  - {name: web, kind: http, listen: "127.0.0.1:18180", pool: app}
  - {name: bodies, kind: http, listen: "127.0.0.1:18190", pool: one}
  - {name: bound, kind: http, listen: "127.0.0.1:18170", pool: fast}
pools:
  - {name: redis, endpoints: [{name: r, address: "127.0.0.1:19379"}]}
  - name: app
    endpoints:
      - {name: a, url: "http://127.0.0.1:19301"}
      - {name: b, url: "http://127.0.0.1:19302"}
      - {name: c, url: "http://127.0.0.1:19303"}
  - {name: one, endpoints: [{name: a, url: "http://127.0.0.1:19301"}], timeouts: {try: 10m, total: 10m}}
  - name: fast
    endpoints:
      - {name: a, url: "http://127.0.0.1:19311"}
      - {name: b, url: "http://127.0.0.1:19312"}
      - {name: c, url: "http://127.0.0.1:19313"}
YAML
taskset -c $pin "$out/rotor" serve --config "$out/rotor.yaml" 2>"$out/rotor.log" & pids+=($!)
declare -A pid=([rotor]=$!)

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
  upstream one { server 127.0.0.1:19301; keepalive 16; }
  upstream fast { server 127.0.0.1:19311; server 127.0.0.1:19312; server 127.0.0.1:19313; keepalive 128; }
  server {
    listen 127.0.0.1:18181;
    keepalive_requests 100000000;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; $nginx_fwd }
  }
  server {
    listen 127.0.0.1:18187 http2;
    keepalive_requests 100000000;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; $nginx_fwd }
  }
  server {
    listen 127.0.0.1:18171;
    keepalive_requests 100000000;
    location / { proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection ""; $nginx_fwd }
  }
  server {
    listen 127.0.0.1:18191;
    client_max_body_size 0;
    location / {
      proxy_pass http://one; proxy_http_version 1.1; proxy_set_header Connection ""; $nginx_fwd
      proxy_request_buffering off; proxy_buffering off; proxy_read_timeout 10m;
    }
  }
  server {
    listen 127.0.0.1:18444 ssl http2;
    keepalive_requests 100000000;
    ssl_certificate $PWD/$out/cert.pem;
    ssl_certificate_key $PWD/$out/key.pem;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; $nginx_fwd }
  }
}
NGINX
taskset -c $pin nginx -c "$PWD/$out/nginx.conf" -p "$PWD/$out" & pids+=($!)
pid[nginx]=$!

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
frontend web
  mode http
  bind 127.0.0.1:18182
  default_backend app
frontend bound
  mode http
  bind 127.0.0.1:18172
  default_backend fast
backend fast
  mode http
  balance roundrobin
  http-reuse always
$haproxy_fwd
  server a 127.0.0.1:19311
  server b 127.0.0.1:19312
  server c 127.0.0.1:19313
frontend bodies
  mode http
  bind 127.0.0.1:18192
  timeout client 10m
  default_backend one
backend one
  mode http
  timeout server 10m
  http-reuse always
$haproxy_fwd
  server a 127.0.0.1:19301
frontend h2
  mode http
  bind 127.0.0.1:18445 ssl crt $PWD/$out/both.pem alpn h2,http/1.1
  default_backend app
backend app
  mode http
  balance roundrobin
  http-reuse always
$haproxy_fwd
  server a 127.0.0.1:19301
  server b 127.0.0.1:19302
  server c 127.0.0.1:19303
HAPROXY
taskset -c $pin haproxy -f "$out/haproxy.cfg" -db >"$out/haproxy.log" 2>&1 & pids+=($!)
pid[haproxy]=$!

cat > "$out/Caddyfile" <<CADDY
{
	admin off
	auto_https off
	servers {
		protocols h1 h2 h2c
	}
}
http://127.0.0.1:18183 {
	reverse_proxy 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303 {
		lb_policy round_robin
		$caddy_fwd
	}
}
http://127.0.0.1:18173 {
	reverse_proxy 127.0.0.1:19311 127.0.0.1:19312 127.0.0.1:19313 {
		lb_policy round_robin
		$caddy_fwd
	}
}
http://127.0.0.1:18193 {
	reverse_proxy 127.0.0.1:19301 {
		$caddy_fwd
	}
}
https://127.0.0.1:18446 {
	tls $PWD/$out/cert.pem $PWD/$out/key.pem
	reverse_proxy 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303 {
		lb_policy round_robin
		$caddy_fwd
	}
}
CADDY
GOMAXPROCS=$CORES taskset -c $pin caddy run --config "$out/Caddyfile" --adapter caddyfile >"$out/caddy.log" 2>&1 & pids+=($!)
pid[caddy]=$!

for port in 19379 19301 19311 18170 18171 18172 18173 18379 18380 18381 18443 18444 18445 18446 18180 18181 18182 18183 18187 18190 18191 18192 18193; do
	wait_port "$port"
done
results=$out/results.tsv
: > "$results"
# result TEST TARGET VALUE records one figure for the chart.
result() { printf "%s\t%s\t%s\n" "$1" "$2" "${3:--}" >> "$results"; }
upload=$(mktemp -p /dev/shm rotor-upload.XXXXXX 2>/dev/null || mktemp)
tmpfiles+=("$upload")
head -c "$SIZE" /dev/zero > "$upload"

{
echo "# rotor beside its peers, $CORES core(s) each (taskset -c $pin; load on $load); $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go version | cut -d' ' -f3)"
echo "# $(nginx -v 2>&1 | cut -d' ' -f3); $(haproxy -v | head -1 | cut -d' ' -f1-3); caddy $(caddy version | cut -d' ' -f1); $(redis-server --version | cut -d' ' -f1-3)"
forwarding_note
echo
# ticks NAME prints the CPU time, in clock ticks, the proxy NAME has used
# (nginx's workers included); 0 for the backend direct.
ticks() {
	[ -n "${pid[$1]:-}" ] || { echo 0; return; }
	cpu_ticks "${pid[$1]}" $(pgrep -P "${pid[$1]}")
}
hz=$(getconf CLK_TCK)
# cpu NAME T0 REQUESTS prints the microseconds of CPU NAME spent a request
# since it had used T0 ticks: what a proxy costs whatever the load
# generator's core allows ("-" for the backend direct).
cpu() { [ -n "${pid[$1]:-}" ] && awk -v t="$(($(ticks "$1") - $2))" -v hz="$hz" -v n="$3" 'BEGIN {printf "%.1f", t * 1e6 / hz / n}' || echo -; }
# per_cpu_s US prints the requests a CPU second serves at US microseconds a
# request ("-" for none).
per_cpu_s() { awk -v c="$1" 'BEGIN {if (c + 0 > 0) printf "%.0f", 1e6 / c; else print "-"}'; }
# ms prints a duration as wrk or h2load writes it (713.00us, 1.4ms, 2s) in ms.
ms() { awk -v d="$1" 'BEGIN {if (d ~ /us$/) {sub(/us$/, "", d); d /= 1000} else if (d ~ /ms$/) {sub(/ms$/, "", d)} else if (d ~ /s$/) {sub(/s$/, "", d); d *= 1000}; printf "%.2f", d}'; }
# each LIST FN runs FN NAME PORT ROUND for every name=port of LIST,
# ROUNDS times, the targets taking turns.
each() {
	local round target
	for round in $(seq "$ROUNDS"); do
		for target in $(turn "$1" "$round"); do
			settle
			"$2" "${target%=*}" "${target#*=}" "$round"
		done
	done
}
of=""
[ "$ROUNDS" -gt 1 ] && of=", median of $ROUNDS rounds taking turns"
declare -A v
# run_wrk KIND NAME PORT ROUND [WRK ARGS...] runs wrk once through NAME
# and keeps its figures under KIND (tls: over TLS, https).
run_wrk() {
	local kind=$1 name=$2 port=$3 f=$out/wrk-$1-$3-$4.txt t0 scheme=http
	shift 4
	[ "$kind" = tls ] && scheme=https
	t0=$(ticks "$name")
	taskset -c $load wrk -t"$CORES" -c"$CONNS" -d"$DURATION" --latency "$@" "$scheme://127.0.0.1:$port/" > "$f"
	v[$kind-cpu-$name]+="$(cpu "$name" "$t0" "$(awk '/requests in/ {print $1}' "$f")") "
	v[$kind-rps-$name]+="$(awk '/Requests\/sec/ {print $2}' "$f") "
	v[$kind-p50-$name]+="$(ms "$(awk '$1 == "50%" {print $2}' "$f")") "
	v[$kind-p99-$name]+="$(ms "$(awk '$1 == "99%" {print $2}' "$f")") "
	v[$kind-err-$name]+="$(awk '/Non-2xx|Socket errors/ {printf "%s ", $0}' "$f")"
}
# wrk_test KIND LIST TEST CPUTEST [WRK ARGS...] runs wrk through each
# target of LIST (name=port), ROUNDS times taking turns, and prints
# KIND's medians, and each target's rate and p99 over HAProxy's round by
# round; it records them for the chart as TEST (requests/s) and CPUTEST
# (requests a CPU second).
wrk_test() {
	local kind=$1 list=$2 test=$3 cputest=$4 target name r c
	local -a args=("${@:5}")
	run_kind() { run_wrk "$kind" "$@" "${args[@]}"; }
	each "$list" run_kind
	printf "%-10s %12s %10s %10s %12s %20s %20s\n" target "requests/s" "p50 ms" "p99 ms" "CPU us/req" "rate/HAProxy's" "p99/HAProxy's"
	for target in $list; do
		name=${target%=*}
		r=$(median <<<"${v[$kind-rps-$name]}") c=$(median <<<"${v[$kind-cpu-$name]}")
		printf "%-10s %12s %10s %10s %12s %20s %20s %s\n" "$name" "$r" "$(median <<<"${v[$kind-p50-$name]}")" "$(median <<<"${v[$kind-p99-$name]}")" "$c" \
			"$(paired "${v[$kind-rps-$name]}" "${v[$kind-rps-haproxy]}")" "$(paired "${v[$kind-p99-$name]}" "${v[$kind-p99-haproxy]}")" "${v[$kind-err-$name]}"
		result "$test" "$name" "$r"
		result "$cputest" "$name" "$(per_cpu_s "$c")"
	done
}
h1="direct=19301 rotor=18180 nginx=18181 haproxy=18182 caddy=18183"
wrk_scripts
if want get; then
echo "## HTTP/1.1: wrk -t$CORES -c$CONNS -d$DURATION --latency, three backends, load on cores $load$of"
wrk_test get "$h1" "HTTP/1.1" "HTTP/1.1 per CPU s"
echo
fi
if want post; then
echo "## HTTP/1.1 POST, 100-byte bodies: wrk -t$CORES -c$CONNS -d$DURATION --latency -s post.lua, three backends, load on cores $load$of"
wrk_test post "$h1" "HTTP/1.1 POST" "POST per CPU s" -s "$out/post.lua"
echo
fi
if want bound; then
echo "## HTTP/1.1, the proxy the limit: wrk -t$CORES -c$CONNS -d$DURATION --latency, three nginx backends answering from memory, load on cores $load$of"
wrk_test bound "direct=19311 rotor=18170 nginx=18171 haproxy=18172 caddy=18173" "HTTP/1.1, proxy-bound" "HTTP/1.1, proxy-bound, per CPU s"
echo
fi
if want tcp; then
echo "## TCP: redis-benchmark -n $REQUESTS -c 50 -t set,get (requests/s; CPU us a request, SET and GET), load on cores $load$of"
printf "%-10s %12s %12s %14s %14s %12s %12s\n" target SET GET "SET -P 16" "GET -P 16" "CPU us/req" "CPU, -P 16"
tcp="direct=19379 rotor=18379 nginx=18380 haproxy=18381" # Caddy has no TCP proxy without a plugin
run_tcp() {
	local name=$1 port=$2 t0 set get pset pget
	t0=$(ticks "$name")
	read -r set get <<<"$(redis_rps taskset -c $load redis-benchmark -p "$port" -n "$REQUESTS" -c 50 -t set,get -q)"
	v[tcpcpu-$name]+="$(cpu "$name" "$t0" "$((REQUESTS * 2))") "
	t0=$(ticks "$name")
	read -r pset pget <<<"$(redis_rps taskset -c $load redis-benchmark -p "$port" -n "$((REQUESTS * 5))" -c 50 -P 16 -t set,get -q)"
	v[ptcpcpu-$name]+="$(cpu "$name" "$t0" "$((REQUESTS * 10))") "
	v[set-$name]+="$set " v[get-$name]+="$get " v[pset-$name]+="$pset " v[pget-$name]+="$pget "
}
each "$tcp" run_tcp
for target in $tcp; do
	name=${target%=*}
	set=$(median <<<"${v[set-$name]}") get=$(median <<<"${v[get-$name]}")
	pset=$(median <<<"${v[pset-$name]}") pget=$(median <<<"${v[pget-$name]}")
	c=$(median <<<"${v[tcpcpu-$name]}") pc=$(median <<<"${v[ptcpcpu-$name]}")
	printf "%-10s %12s %12s %14s %14s %12s %12s\n" "$name" "$set" "$get" "$pset" "$pget" "$c" "$pc"
	result "TCP SET" "$name" "$set"
	result "TCP GET" "$name" "$get"
	result "TCP SET -P16" "$name" "$pset"
	result "TCP GET -P16" "$name" "$pget"
	result "TCP per CPU s" "$name" "$(per_cpu_s "$c")"
	result "TCP -P16 per CPU s" "$name" "$(per_cpu_s "$pc")"
done
for t in "TCP SET" "TCP GET" "TCP SET -P16" "TCP GET -P16" "TCP per CPU s" "TCP -P16 per CPU s"; do result "$t" caddy -; done
echo
fi
if want tls; then
echo "## HTTP/1.1 over TLS: wrk -t$CORES -c$CONNS -d$DURATION --latency to each TLS listener, three backends, load on cores $load$of"
wrk_test tls "rotor=18443 nginx=18444 haproxy=18445 caddy=18446" "HTTP/1.1 over TLS" "HTTP/1.1 over TLS per CPU s"
echo
fi
# h2_test KEY TARGETS SCHEME TITLE runs h2load through each of TARGETS
# ("name=port ...") over SCHEME (https: HTTP/2 over TLS; http: HTTP/2
# with prior knowledge, h2c) and prints each one's medians.
h2_test() {
	local key=$1 targets=$2 scheme=$3 title=$4 target name r c
	echo "## $title: h2load -n $REQUESTS -c 20 -m 10, load on cores $load$of"
	printf "%-10s %12s %10s %10s %12s\n" target "requests/s" "mean ms" "max ms" "CPU us/req"
	run_h2() {
		local name=$1 port=$2 f=$out/h2load-$2-$3.txt t0
		t0=$(ticks "$name")
		taskset -c $load h2load -t "$CORES" -n "$REQUESTS" -c 20 -m 10 "$scheme://127.0.0.1:$port/" > "$f" 2>&1 || true
		v[$key-cpu-$name]+="$(cpu "$name" "$t0" "$REQUESTS") "
		v[$key-$name]+="$(awk '/^finished in/ {print $4}' "$f") "
		v[$key-mean-$name]+="$(ms "$(awk '/^time for request:/ {print $6}' "$f")") "
		v[$key-max-$name]+="$(ms "$(awk '/^time for request:/ {print $5}' "$f")") "
		v[$key-ok-$name]="$(awk '/^status codes:/ {print $3, $4}' "$f") $(awk '/^Application protocol:/ {print $3}' "$f")"
	}
	each "$targets" run_h2
	for target in $targets; do
		name=${target%=*}
		r=$(median <<<"${v[$key-$name]}") c=$(median <<<"${v[$key-cpu-$name]}")
		printf "%-10s %12s %10s %10s %12s  %s\n" "$name" "$r" "$(median <<<"${v[$key-mean-$name]}")" "$(median <<<"${v[$key-max-$name]}")" "$c" "(${v[$key-ok-$name]})"
		[ "$key" = h2 ] || continue
		result "HTTP/2" "$name" "$r"
		result "HTTP/2 per CPU s" "$name" "$(per_cpu_s "$c")"
	done
	echo
}
if want h2; then
	h2_test h2 "rotor=18443 nginx=18444 haproxy=18445 caddy=18446" https "HTTP/2 over TLS"
fi
if want h2c; then
	h2_test h2c "rotor=18180 nginx=18187 haproxy=18182 caddy=18183" http "HTTP/2 without TLS (h2c, prior knowledge)"
fi
if want bodies; then
# speed prints curl's MB/s on the load's cores, the better of two runs.
speed() { curl_best "$load" 2 "$@"; }
echo "## large bodies: curl, $((SIZE >> 20)) MiB (MB/s, best of 2), load on cores $load"
printf "%-10s %14s %14s %14s %14s\n" target "down, length" "down, chunked" "up, length" "up, chunked"
for target in direct=19301 rotor=18190 nginx=18191 haproxy=18192 caddy=18193; do
	base=http://127.0.0.1:${target#*=}
	dl=$(speed "$base/bytes/$SIZE")
	dc=$(speed "$base/bytes/$SIZE?chunked=1")
	ul=$(speed -X POST -T "$upload" "$base/sink")
	uc=$(speed -X POST -T "$upload" -H "Transfer-Encoding: chunked" "$base/sink")
	printf "%-10s %14s %14s %14s %14s\n" "${target%=*}" "$dl" "$dc" "$ul" "$uc"
	result "download, length" "${target%=*}" "$dl"
	result "download, chunked" "${target%=*}" "$dc"
	result "upload, length" "${target%=*}" "$ul"
	result "upload, chunked" "${target%=*}" "$uc"
done
fi
} | tee "$out/tables.txt"

# The chart, of what the tests charted ("h2c" charts nothing).
if [ -s "$results" ]; then
	chart=$out/peers-${CORES}core.svg
	if [ "${WRITE:-}" = 1 ]; then chart=docs/img/peers-${CORES}core.svg; fi
	go run ./bench/chart -ref haproxy -title "rotor beside its peers, $CORES core(s) each (throughput / HAProxy's)" "$results" "$chart"
	echo
	echo "chart: $chart"
fi
if [ "${WRITE:-}" = 1 ]; then
	begin="<!-- peers-${CORES}core:begin -->" end="<!-- peers-${CORES}core:end -->"
	grep -qF "$begin" docs/BENCHMARKS.md || { echo "docs/BENCHMARKS.md has no $begin marker" >&2; exit 1; }
	{ echo '```'; echo "bash bench/peers.sh (CORES=$CORES)"; cat "$out/tables.txt"; echo '```'; } > "$out/tables.md"
	awk -v b="$begin" -v e="$end" -v f="$out/tables.md" '
		$0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
		$0 == e { skip = 0 }
		!skip { print }' docs/BENCHMARKS.md > "$out/BENCHMARKS.md"
	mv "$out/BENCHMARKS.md" docs/BENCHMARKS.md
	echo "tables written into docs/BENCHMARKS.md"
fi
