#!/usr/bin/env bash
# The system calls a request costs rotor and HAProxy, counted by the
# kernel's tracepoints (perf stat), and the user and system CPU time each
# spends: where bench/instructions.sh counts the user-space side, this
# is the kernel's. Each proxy runs alone on core 0 (GOMAXPROCS=1;
# HAProxy with one thread) over three bench/upstream backends on core 1,
# and h2load sends it N requests (default 20,000) on 50 connections
# (HTTP/1.1 GETs); then, for the TCP path, redis-benchmark sends N GETs
# pipelined by 16 through rotor's tcp listener and HAProxy's mode tcp.
# ROUNDS (default 3) runs each that many times, taking turns, and prints
# each figure's median.
# Needs: perf (Debian: linux-perf), h2load, haproxy, redis-server,
# redis-benchmark, taskset, and the right to read the syscalls
# tracepoints (root, or kernel.perf_event_paranoid -1).
# Usage: bash bench/syscalls.sh > bench/out/syscalls.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs perf h2load haproxy redis-server redis-benchmark taskset curl
N=${N:-20000}
ROUNDS=${ROUNDS:-3}
setup syscalls

taskset -c 1 "$out/upstream" 127.0.0.1:19801 127.0.0.1:19802 127.0.0.1:19803 & pids+=($!)
start_redis 1 19879
web_config "$out/rotor.yaml" 127.0.0.1:18800 19801 19802 19803
cat >> "$out/rotor.yaml" <<YAML
  - {name: redis, endpoints: [{name: r, address: "127.0.0.1:19879"}]}
YAML
sed -i 's|^listeners: \[\(.*\)\]$|listeners: [\1, {name: redis, kind: tcp, listen: "127.0.0.1:18879", pool: redis}]|' "$out/rotor.yaml"
cat > "$out/haproxy.cfg" <<HAPROXY
global
  nbthread 1
defaults
  timeout connect 2s
  timeout client 30s
  timeout server 30s
frontend web
  mode http
  bind 127.0.0.1:18801
  default_backend app
backend app
  mode http
  balance roundrobin
  server a 127.0.0.1:19801
  server b 127.0.0.1:19802
  server c 127.0.0.1:19803
frontend redis
  mode tcp
  bind 127.0.0.1:18881
  default_backend redis
backend redis
  mode tcp
  server r 127.0.0.1:19879
HAPROXY
for _ in $(seq 50); do curl -sf http://127.0.0.1:19801/ >/dev/null && break; sleep 0.1; done

events=context-switches
for c in epoll_wait epoll_pwait recvfrom sendto read write futex nanosleep; do
	events+=",syscalls:sys_enter_$c"
done

# measure TARGET PATH: one count of TARGET (rotor or haproxy) on PATH
# (http or tcp), as "name value" lines, a request's share of each.
measure() {
	local target=$1 path=$2 stat=$out/$1-$2.perf port
	case $target in
	rotor) GOMAXPROCS=1 taskset -c 0 perf stat -e "$events" -o "$stat" "$out/rotor" serve --config "$out/rotor.yaml" >/dev/null 2>&1 & ;;
	haproxy) taskset -c 0 perf stat -e "$events" -o "$stat" haproxy -f "$out/haproxy.cfg" -db >/dev/null 2>&1 & ;;
	esac
	local sp=$!
	case $target-$path in
	rotor-http) port=18800 ;; haproxy-http) port=18801 ;; rotor-tcp) port=18879 ;; haproxy-tcp) port=18881 ;;
	esac
	wait_port "$port"
	if [ "$path" = http ]; then
		taskset -c 1 h2load --h1 -n "$N" -c 50 "http://127.0.0.1:$port/" | grep -q "$N 2xx" || echo "h2load through $target failed" >&2
	else
		taskset -c 1 redis-benchmark -p "$port" -n "$N" -c 50 -P 16 -t get -q >/dev/null
	fi
	# The proxy (perf's child) stopped, perf writes its counts.
	pkill -INT -P "$sp" || true
	wait "$sp" 2>/dev/null || true
	awk -v n="$N" '$2 ~ /^(syscalls:sys_enter_|context-switches)/ && $1 ~ /^[0-9]+$/ {name = $2; sub("syscalls:sys_enter_", "", name); printf "%s %.2f\n", name, $1 / n}' "$stat"
	awk -v n="$N" '/seconds user/ {printf "user_us %.2f\n", $1 * 1e6 / n} /seconds sys/ {printf "sys_us %.2f\n", $1 * 1e6 / n}' "$stat"
}

declare -A v
for round in $(seq "$ROUNDS"); do
	order="rotor haproxy"
	((round % 2 == 0)) && order="haproxy rotor"
	for path in http tcp; do
		for target in $order; do
			while read -r name value; do
				v[$path-$target-$name]+="$value "
			done < <(measure "$target" "$path")
		done
	done
done

echo "# system calls and CPU a request, perf stat; $N requests a count, median of $ROUNDS; $(date -u +%Y-%m-%dT%H:%MZ), $(cores_note), $(go env GOVERSION), $(haproxy -v | head -1 | cut -d' ' -f1-3)"
for path in http tcp; do
	echo
	case $path in
	http) echo "## HTTP/1.1 GET: h2load --h1 -n $N -c 50, three backends" ;;
	tcp) echo "## TCP: redis-benchmark -n $N -c 50 -P 16 -t get (a request: one GET of a pipeline of 16)" ;;
	esac
	printf '%-8s %8s %8s %8s %8s %8s %8s %9s %9s\n' target recvfrom sendto epoll other switches user_us sys_us cpu_us
	for target in rotor haproxy; do
		m() { median <<<"${v[$path-$target-$1]:-}"; }
		epoll=$(awk -v a="$(m epoll_wait)" -v b="$(m epoll_pwait)" 'BEGIN {printf "%.2f", a + b}')
		other=$(awk -v a="$(m read)" -v b="$(m write)" -v c="$(m futex)" -v d="$(m nanosleep)" 'BEGIN {printf "%.2f", a + b + c + d}')
		cpu=$(awk -v a="$(m user_us)" -v b="$(m sys_us)" 'BEGIN {printf "%.2f", a + b}')
		printf '%-8s %8s %8s %8s %8s %8s %8s %9s %9s\n' "$target" "$(m recvfrom)" "$(m sendto)" "$epoll" "$other" "$(m context-switches)" "$(m user_us)" "$(m sys_us)" "$cpu"
	done
done
