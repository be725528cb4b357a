# Shared by the live benchmark scripts: source it, check the tools with
#   needs TOOL...
# and call
#   setup NAME [GO BUILD FLAGS...]
# for a fresh bench/out/NAME (in $out) with rotor (built with the flags)
# and bench/upstream built into it. Every process whose pid is added to
# pids is killed when the script exits, and every file added to tmpfiles
# removed.
# FORWARDED=1 (the default) has the peers send their backends the four
# fields rotor adds to every request (X-Forwarded-For, X-Forwarded-Host,
# X-Forwarded-Proto, X-Real-Ip), as their users' configs usually do, so
# that the backends parse as much from each; FORWARDED=0 runs them bare.
# nginx_fwd, haproxy_fwd and caddy_fwd are the settings for it, for a
# location, a backend and a reverse_proxy block (empty when bare).
FORWARDED=${FORWARDED:-1}
case "$FORWARDED" in 0 | 1) ;; *) echo "FORWARDED must be 0 or 1" >&2; exit 1 ;; esac
nginx_fwd="" haproxy_fwd="" caddy_fwd=""
if [ "$FORWARDED" = 1 ]; then
	nginx_fwd='proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; proxy_set_header X-Forwarded-Host $http_host; proxy_set_header X-Forwarded-Proto $scheme; proxy_set_header X-Real-IP $remote_addr;'
	haproxy_fwd='  option forwardfor
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-request set-header X-Forwarded-Proto %[ssl_fc,iif(https,http)]
  http-request set-header X-Real-IP %[src]'
	caddy_fwd='header_up X-Real-IP {remote_host}'
fi
# forwarding_note prints the line that says which, for a table's head.
forwarding_note() {
	if [ "$FORWARDED" = 1 ]; then
		echo "# every proxy sends its backends X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto and X-Real-Ip (FORWARDED=1)"
	else
		echo "# rotor sends its backends X-Forwarded-For, X-Forwarded-Host, X-Forwarded-Proto and X-Real-Ip; the peers, bare, none (FORWARDED=0)"
	fi
}

# cores_note prints the machine's core count and the model its cores
# report (/proc/cpuinfo), for a table's head: this machine's host
# changes from day to day, and a proxy's cost relative to another's
# with it.
cores_note() {
	local model
	model=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
	echo "$(nproc) cores${model:+ ($model)}"
}

needs() {
	local tool missing=()
	for tool in "$@"; do
		command -v "$tool" >/dev/null || missing+=("$tool")
	done
	if ((${#missing[@]})); then
		echo "$0 needs ${missing[*]}" >&2
		exit 1
	fi
}

setup() {
	out=bench/out/$1
	rm -rf "$out" && mkdir -p "$out"
	go build "${@:2}" -o "$out/rotor" ./cmd/rotor
	go build -o "$out/upstream" ./bench/upstream
	pids=()
	tmpfiles=()
	trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -f "${tmpfiles[@]}"' EXIT
}

# build_base REV checks the git revision REV out in a worktree of its own
# ($base_tree) and builds its rotor as $out/rotor-base; the worktree is
# removed when the script exits, as the processes in pids are killed and
# the files in tmpfiles removed. $out and pids are set first (setup).
build_base() {
	base_tree=$(mktemp -d)
	trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -f ${tmpfiles[@]+"${tmpfiles[@]}"}; git worktree remove --force "$base_tree" 2>/dev/null || rm -rf "$base_tree"' EXIT
	git worktree add --detach "$base_tree" "$1" >/dev/null 2>&1
	(cd "$base_tree" && go build -o "$OLDPWD/$out/rotor-base" ./cmd/rotor)
}

# selfsigned writes a certificate for 127.0.0.1 and its key to
# $out/cert.pem and $out/key.pem, for the TLS listeners.
selfsigned() {
	openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1" \
		-keyout "$out/key.pem" -out "$out/cert.pem" 2>/dev/null
}

# pin_cores sets pin and load, the cores the proxy and the load run on,
# from CORES: 1 (the default), the proxy on core 0 and the load on core 1;
# 2, both on both.
pin_cores() {
	CORES=${CORES:-1}
	case "$CORES" in
	1) pin=0 load=1 ;;
	2) pin=0,1 load=0,1 ;;
	*) echo "CORES must be 1 or 2" >&2; exit 1 ;;
	esac
}

# cpu_ticks PID...: the CPU time, user and system, the processes have used
# so far, in clock ticks (getconf CLK_TCK a second); 0 for one gone.
# user_ticks PID...: its user-space part.
cpu_ticks() { stat_ticks '$14 + $15' "$@"; }
user_ticks() { stat_ticks '$14' "$@"; }
# stat_ticks EXPR PID...: EXPR of /proc/PID/stat's fields, summed over
# the processes ($14 user time, $15 system time).
stat_ticks() {
	local expr=$1 t=0 p
	shift
	for p in "$@"; do
		t=$((t + $(awk "{print $expr}" "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}

# wait_ns PID...: the time the processes' threads have waited for a core
# while ready to run, in ns (/proc/PID/task/*/schedstat), summed; 0 for
# one gone.
wait_ns() {
	local p
	for p in "$@"; do cat /proc/"$p"/task/*/schedstat 2>/dev/null || true; done | awk '{t += $2} END {printf "%.0f\n", t}'
}

# switch_count PID...: the context switches the processes' threads have
# made so far, voluntary and not (/proc/PID/task/*/status), summed; 0
# for one gone.
switch_count() {
	local p
	for p in "$@"; do cat /proc/"$p"/task/*/status 2>/dev/null || true; done |
		awk '/^(non)?voluntary_ctxt_switches:/ {n += $2} END {printf "%d\n", n}'
}

# core_ticks N[,M...]: the busy and total clock ticks so far of core N
# (and of M..., summed; /proc/stat), for core_busy.
core_ticks() {
	awk -v cores="$1" 'BEGIN {n = split(cores, c, ","); for (i = 1; i <= n; i++) want["cpu" c[i]] = 1}
		$1 in want {b += $2 + $3 + $4 + $7 + $8; t += $2 + $3 + $4 + $5 + $6 + $7 + $8} END {print b, t}' /proc/stat
}

# core_busy "BEFORE" "AFTER": the share of the time between two
# core_ticks that the core (or cores) was busy, in percent.
core_busy() { awk -v a="$1" -v b="$2" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.0f", 100 * (y[1] - x[1]) / (y[2] - x[2])}'; }

# median prints the median of the numbers it reads, "-" when there are none.
median() { tr ' ' '\n' | { grep -E '^[0-9.]+$' || true; } | sort -g | awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : "-"}'; }

# curl_best CORES ROUNDS CURL-ARGS... prints the best of ROUNDS curl runs
# on CORES (taskset), download or upload speed, in MB/s.
curl_best() {
	local cores=$1 rounds=$2 b=0 s
	shift 2
	for _ in $(seq "$rounds"); do
		s=$(taskset -c "$cores" curl -sS -o /dev/null -w '%{speed_download} %{speed_upload}\n' "$@" | awk '{print ($1 > $2 ? $1 : $2) / 1e6}')
		b=$(awk -v a="$b" -v s="$s" 'BEGIN {print (s > a ? s : a)}')
	done
	printf "%.0f" "$b"
}

# web_config FILE LISTEN PORT1 PORT2 PORT3 [LISTENER-FIELDS] writes a rotor
# config: no admin listener, one http listener on LISTEN (with any more
# fields given, e.g. ", tls: {...}") over a round-robin pool of the three
# backends on 127.0.0.1.
web_config() {
	cat > "$1" <<YAML
admin: {listen: "off"}
listeners: [{name: web, kind: http, listen: "$2", pool: app${6:-}}]
pools:
  - name: app
    policy: round_robin
    endpoints:
      - {name: a, url: "http://127.0.0.1:$3"}
      - {name: b, url: "http://127.0.0.1:$4"}
      - {name: c, url: "http://127.0.0.1:$5"}
YAML
}

# wait_port PORT waits, up to 10 s, until something listens on
# 127.0.0.1:PORT; it fails, saying so, when nothing does.
wait_port() {
	for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
	echo "nothing listens on $1" >&2
	return 1
}

# start_redis CORES PORT starts a redis-server for the benchmarks on
# 127.0.0.1:PORT, on CORES (taskset), with nothing saved; its log goes to
# $out/redis-PORT.log and it is killed when the script exits.
start_redis() {
	taskset -c "$1" redis-server --bind 127.0.0.1 --port "$2" --save "" --appendonly no --loglevel warning \
		>"$out/redis-$2.log" &
	pids+=($!)
}

# redis_rps CMD... runs redis-benchmark -q (CMD) and prints the rate of
# each test it ran, in its order (-t set,get: SET's, then GET's).
redis_rps() { "$@" | tr '\r' '\n' | awk '/requests per second/ {print $2}' | paste -sd' '; }

# paths_config FILE PORT writes the config of every path bench/compare.sh
# measures, its listeners on PORT and the four ports after it: http
# (PORT), tcp (+1) and forward (+2) over bench/upstream's three backends
# on 19301-19303, HTTP/2 over TLS (+3, $out/cert.pem from selfsigned) to
# the same, and tcp to a redis-server on 19379 (+4).
paths_config() {
	cat > "$1" <<YAML
admin: {listen: "off"}
listeners:
  - {name: web, kind: http, listen: "127.0.0.1:$2", pool: app}
  - {name: db, kind: tcp, listen: "127.0.0.1:$(($2 + 1))", pool: tcpapp}
  - {name: out, kind: forward, listen: "127.0.0.1:$(($2 + 2))", pool: routes, allow_targets: [127.0.0.0/8]}
  - {name: h2, kind: http, listen: "127.0.0.1:$(($2 + 3))", pool: app, tls: {cert: cert.pem, key: key.pem}}
  - {name: kv, kind: tcp, listen: "127.0.0.1:$(($2 + 4))", pool: redis}
pools:
  - name: app
    endpoints:
      - {name: a, url: "http://127.0.0.1:19301"}
      - {name: b, url: "http://127.0.0.1:19302"}
      - {name: c, url: "http://127.0.0.1:19303"}
  - name: tcpapp
    endpoints:
      - {name: a, address: "127.0.0.1:19301"}
      - {name: b, address: "127.0.0.1:19302"}
      - {name: c, address: "127.0.0.1:19303"}
  - name: routes
    endpoints:
      - {name: direct, url: "direct://"}
  - name: redis
    endpoints:
      - {name: r, address: "127.0.0.1:19379"}
YAML
}

# wrk_scripts writes wrk's scripts into $out: post.lua POSTs bodies of
# POST_BYTES (100 unless set), chunked.lua the same bodies chunked (one
# chunk, no Content-Length: as a client sends a body of no known length);
# forward.lua asks a forward proxy for the backend on 19301.
wrk_scripts() {
	cat > "$out/post.lua" <<LUA
wrk.method = "POST"
wrk.body = string.rep("x", ${POST_BYTES:-100})
wrk.headers["Content-Type"] = "text/plain"
LUA
	cat > "$out/chunked.lua" <<LUA
local n = ${POST_BYTES:-100}
local req = "POST / HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nContent-Type: text/plain\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n" ..
  string.format("%x", n) .. "\\r\\n" .. string.rep("x", n) .. "\\r\\n0\\r\\n\\r\\n"
request = function() return req end
LUA
	cat > "$out/forward.lua" <<'LUA'
wrk.path = "http://127.0.0.1:19301/"
wrk.headers["Host"] = "127.0.0.1:19301"
LUA
}

# nginx_backends CORES PORT... starts nginx (one worker, on CORES) as
# backends that answer every request from memory, 200 and a line of
# text, on 127.0.0.1:PORT for each PORT: backends that leave the proxy's
# core the limit. It is killed when the script exits.
nginx_backends() {
	local cores=$1 listen="" port
	shift
	for port in "$@"; do listen+="listen 127.0.0.1:$port; "; done
	cat > "$out/backends.conf" <<NGINX
worker_processes 1;
daemon off;
pid $PWD/$out/backends.pid;
error_log $PWD/$out/backends.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  server {
    $listen
    location / { default_type text/plain; return 200 "hello from upstream\n"; }
  }
}
NGINX
	taskset -c "$cores" nginx -c "$PWD/$out/backends.conf" -p "$PWD/$out" &
	pids+=($!)
}

# turn LIST ROUND prints LIST's words rotated by ROUND-1: each target
# takes another place in each round.
turn() {
	local -a w
	read -ra w <<<"$1"
	local k=$((($2 - 1) % ${#w[@]}))
	echo "${w[@]:k}" "${w[@]:0:k}"
}

# paired "FIGURES" "HAPROXY'S" prints a target's figure (a rate, a p99)
# over HAProxy's, each round's against the same round's (the machine's
# swings fall on both alike): the median and, over more than one round,
# the range.
paired() {
	local -a a b
	local i ratios=""
	read -ra a <<<"$1"
	read -ra b <<<"$2"
	for i in "${!a[@]}"; do
		ratios+="$(awk -v x="${a[i]}" -v y="${b[i]:-0}" 'BEGIN {if (x > 0 && y > 0) printf "%.4f", x / y}') "
	done
	tr ' ' '\n' <<<"$ratios" | { grep -E '^[0-9.]+$' || true; } | sort -g |
		awk '{x[NR] = $1} END {if (!NR) print "-"; else if (NR == 1) printf "%.2fx\n", x[1]; else printf "%.2fx (%.2f-%.2f)\n", x[int((NR + 1) / 2)], x[1], x[NR]}'
}

# nginx_proxy CORES PORT BACKEND_PORT... starts nginx (WORKERS workers,
# default one, on CORES) as a reverse proxy on 127.0.0.1:PORT, round
# robin over the backends on 127.0.0.1, its connections to them kept
# alive as rotor's and HAProxy's are, and a client's served without a
# cap on its requests, sending the forwarding fields as FORWARDED
# says. Its files are $out/nginx-PORT.*; it is killed when the script
# exits ($! is its pid).
nginx_proxy() {
	local cores=$1 port=$2 servers="" b
	shift 2
	for b in "$@"; do servers+="server 127.0.0.1:$b; "; done
	cat > "$out/nginx-$port.conf" <<NGINX
worker_processes ${WORKERS:-1};
daemon off;
pid $PWD/$out/nginx-$port.pid;
error_log $PWD/$out/nginx-$port.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream app { $servers keepalive 128; }
  server {
    listen 127.0.0.1:$port;
    keepalive_requests 100000000;
    location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; $nginx_fwd }
  }
}
NGINX
	taskset -c "$cores" nginx -c "$PWD/$out/nginx-$port.conf" -p "$PWD/$out" &
	pids+=($!)
}

# haproxy_config PORT BACKEND_PORT... writes $out/haproxy-PORT.cfg:
# HAProxy (WORKERS threads, default one) as a reverse proxy on
# 127.0.0.1:PORT, round robin over the backends on 127.0.0.1, reusing its
# connections to them, sending the forwarding fields as FORWARDED says.
haproxy_config() {
	local port=$1 servers="" b
	shift
	for b in "$@"; do servers+="  server s$b 127.0.0.1:$b"$'\n'; done
	cat > "$out/haproxy-$port.cfg" <<HAPROXY
global
  nbthread ${WORKERS:-1}
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend web
  bind 127.0.0.1:$port
  default_backend app
backend app
  balance roundrobin
$haproxy_fwd
$servers
HAPROXY
}

# haproxy_proxy CORES PORT BACKEND_PORT... starts HAProxy on CORES with
# haproxy_config's config for PORT and the backends; its output goes to
# $out/haproxy-PORT.log, and it is killed when the script exits ($! is
# its pid).
haproxy_proxy() {
	local cores=$1 port=$2
	shift
	haproxy_config "$@"
	taskset -c "$cores" haproxy -f "$out/haproxy-$port.cfg" -db >"$out/haproxy-$port.log" 2>&1 &
	pids+=($!)
}

# settle waits, up to 10 s, until the proxies are idle: a Go server goes
# on working for a while after a load (its collector, returning memory),
# on the core the next target is measured on. It sums ticks NAME (the
# caller's) over the names of the caller's pid array.
settle() {
	local a b name
	for _ in $(seq 50); do
		a=0
		for name in "${!pid[@]}"; do a=$((a + $(ticks "$name"))); done
		[ "$a" = "${b:-}" ] && return
		b=$a
		sleep 0.2
	done
}
