#!/usr/bin/env bash
# rotor serve against an earlier rotor, in one run: the working tree and
# the git revision BASE (default: main) are built and started side by
# side, each on core 0 with GOMAXPROCS=1, with the same config: an http
# listener over three backends, a tcp listener over the same backends, a
# forward listener with one direct route, and an HTTP/2 listener over TLS
# (self-signed) to the same backends. wrk (one thread, core 1; h2load -c 20
# -m 10 for HTTP/2) takes turns between the two, ROUNDS times per path,
# the order swapped every
# round, so that a noisy machine slows both alike; each round gives a
# ratio new/base, and the table gives each side's median and the median
# and range of the paired ratios, and each side's CPU time a request
# (from /proc: what reads better than the rate when the load's core is
# the limit) with the median of its paired ratios. Then the library: balance's Pick+Done at
# 64 endpoints, every policy, the two test binaries taking turns.
# Needs: wrk, h2load, openssl, taskset, git (Debian: wrk nghttp2-client
# openssl util-linux git).
# PROXIES=0 skips the proxy paths; PATHS picks some of them (default
# "http tcp forward h2"; "post" adds POSTs of 100-byte bodies through the
# http listener; "h2post" the same bodies with h2load over HTTP/2 and
# TLS; "cookie" GETs with a 6 KiB Cookie field, a head over the short
# way's first 4 KiB buffer; "close" GETs with Connection: close, a
# connection accepted for each request; "redis" adds redis-benchmark SET and GET -c 50 through the tcp
# listener to a redis-server, which it then needs;
# "tls" adds HTTP/1.1 over TLS: wrk to the HTTP/2 listener, which serves
# wrk HTTP/1.1 as it offers no ALPN);
# LIB_ROUNDS (default ROUNDS) sets the library's
# rounds. CORES=2 gives each rotor both cores (GOMAXPROCS=2), shared with
# the load and the backends (wrk -t2, h2load -t2), as peers.sh's two-core
# run does.
# Usage: bash bench/compare.sh [BASE] > bench/out/compare.txt
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/setup.sh
needs wrk h2load openssl taskset git
pin_cores
BASE=${1:-main}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-50}
ROUNDS=${ROUNDS:-5}
H2REQUESTS=${H2REQUESTS:-50000}
PROXIES=${PROXIES:-1}           # 0: the library's Pick+Done alone
PATHS=${PATHS:-http tcp forward h2}
REDIS_REQUESTS=${REDIS_REQUESTS:-100000}
LIB_ROUNDS=${LIB_ROUNDS:-$ROUNDS}
# Each policy's run: long enough that a slow moment of the machine is a
# part of it, not all of it (200000x, about 20 ms, moved medians by a tenth).
LIB_BENCHTIME=${LIB_BENCHTIME:-200ms}
out=bench/out/compare
rm -rf "$out" && mkdir -p "$out"
pids=()
build_base "$BASE"
(cd "$base_tree" && go test -c -o "$OLDPWD/$out/balance-base.test" ./balance)
go build -o "$out/rotor-new" ./cmd/rotor
go test -c -o "$out/balance-new.test" ./balance
go build -o "$out/upstream" ./bench/upstream
taskset -c $load "$out/upstream" 127.0.0.1:19301 127.0.0.1:19302 127.0.0.1:19303 & pids+=($!)

selfsigned
if [[ " $PATHS " == *" redis "* ]]; then
	needs redis-server redis-benchmark
	start_redis "$load" 19379
fi

if [ "$PROXIES" = 1 ]; then
	# The same config on other ports: the base's on 18300-18304, the new's
	# on 18310-18314.
	paths_config "$out/base.yaml" 18300
	paths_config "$out/new.yaml" 18310
	declare -A pid
	GOMAXPROCS=$CORES taskset -c $pin "$out/rotor-base" serve --config "$out/base.yaml" 2>"$out/base.log" & pids+=($!)
	pid[base]=$!
	GOMAXPROCS=$CORES taskset -c $pin "$out/rotor-new" serve --config "$out/new.yaml" 2>"$out/new.log" & pids+=($!)
	pid[new]=$!
	hz=$(getconf CLK_TCK)
	# ticks SIDE: the side's CPU time so far, user and system, in clock ticks.
	ticks() { cpu_ticks "${pid[$1]}"; }
	wrk_scripts
	head -c 100 /dev/zero | tr '\0' x > "$out/body100"
	ports="19301 18300 18301 18302 18303 18304 18310 18311 18312 18313 18314"
	if [[ " $PATHS " == *" redis "* ]]; then ports+=" 19379"; fi
	for port in $ports; do
		wait_port "$port"
	done

	# run SIDE PATH PORT [WRK ARGS]: one wrk run (over TLS for the tls
	# path); prints "rps p99_ms requests".
	run() {
		local file="$out/wrk-$1-$2-$round.txt" scheme=http
		[ "$2" = tls ] && scheme=https
		taskset -c $load wrk -t"$CORES" -c"$CONNS" -d"$DURATION" --latency "${@:4}" "$scheme://127.0.0.1:$3/" > "$file"
		if grep -qE 'Non-2xx|Socket errors' "$file"; then
			echo "$1 $2: errors in $file" >&2
			grep -E 'Non-2xx|Socket errors' "$file" >&2
		fi
		awk '/Requests\/sec/ {rps=$2} / requests in / {n=$1} $1=="99%" {p=$2; if (p ~ /us$/) {sub(/us/,"",p); p/=1000} else if (p ~ /ms$/) {sub(/ms/,"",p)} else if (p ~ /s$/) {sub(/s/,"",p); p*=1000}} END {printf "%s %s %s\n", rps, p, n}' "$file"
	}

	# run_h2 SIDE PORT [H2LOAD ARGS]: one h2load run over TLS; prints
	# "rps - requests" (no p99).
	run_h2() {
		local file="$out/h2load-$1-$round${3:+-post}.txt"
		taskset -c $load h2load -t "$CORES" -n "$H2REQUESTS" -c 20 -m 10 "${@:3}" "https://127.0.0.1:$2/" > "$file"
		awk '/^finished in/ {sub(/,/, "", $4); rps=$4} /^requests:/ {n=$8} END {print rps, "-", n}' "$file"
	}

	# run_redis SIDE PORT: redis-benchmark SET and GET through the tcp
	# listener; prints "rps - requests" (the mean of the two rates).
	run_redis() {
		local file="$out/redis-$1-$round.txt"
		taskset -c $load redis-benchmark -p "$2" -n "$REDIS_REQUESTS" -c "$CONNS" -t set,get -q > "$file"
		tr '\r' '\n' < "$file" | awk -v n="$REDIS_REQUESTS" '/requests per second/ {sum += $2; k++} END {printf "%.0f - %d\n", sum / k, n * k}'
	}

	declare -A rps p99 ratio cpu cpuratio
	for round in $(seq "$ROUNDS"); do
		order="base new"
		if ((round % 2 == 0)); then order="new base"; fi
		for path in $PATHS; do
			declare -A this=() thiscpu=()
			for side in $order; do
				case "$side" in base) off=0 ;; new) off=10 ;; esac
				t0=$(ticks "$side")
				case "$path" in
				http) r=$(run "$side" "$path" $((18300 + off))) ;;
				tcp) r=$(run "$side" "$path" $((18301 + off))) ;;
				forward) r=$(run "$side" "$path" $((18302 + off)) -s "$out/forward.lua") ;;
				post) r=$(run "$side" "$path" $((18300 + off)) -s "$out/post.lua") ;;
				cookie) r=$(run "$side" "$path" $((18300 + off)) -H "Cookie: session=$(head -c 6144 /dev/zero | tr '\0' c)") ;;
				close) r=$(run "$side" "$path" $((18300 + off)) -H "Connection: close") ;;
				h2) r=$(run_h2 "$side" $((18303 + off))) ;;
				h2post) r=$(run_h2 "$side" $((18303 + off)) -d "$out/body100") ;;
				tls) r=$(run "$side" "$path" $((18303 + off))) ;;
				redis) r=$(run_redis "$side" $((18304 + off))) ;;
				esac
				read -r r_rps r_p99 r_n <<<"$r"
				us=$(awk -v t="$(($(ticks "$side") - t0))" -v hz="$hz" -v n="$r_n" 'BEGIN {printf "%.1f", t * 1e6 / hz / n}')
				rps[$side-$path]+="$r_rps "
				p99[$side-$path]+="$r_p99 "
				cpu[$side-$path]+="$us "
				this[$side]=$r_rps
				thiscpu[$side]=$us
			done
			ratio[$path]+="$(echo "${this[new]} / ${this[base]}" | bc -l) "
			cpuratio[$path]+="$(echo "${thiscpu[new]} / ${thiscpu[base]}" | bc -l) "
		done
	done

	echo "rotor serve, $BASE ($(git rev-parse --short "$BASE")) against the working tree, one run, $ROUNDS rounds taking turns"
	echo "wrk -t$CORES -c$CONNS -d$DURATION --latency (h2: h2load -t $CORES -n $H2REQUESTS -c 20 -m 10 over TLS) on cores $load; each rotor GOMAXPROCS=$CORES on cores $pin; medians"
	echo "(CPU us: the rotor's user and system time over the run, a request; CPU ratio: the median of the paired new/base ratios)"
	echo
	printf "%-8s %12s %12s %8s %14s %12s %12s %12s %12s %10s\n" path "base req/s" "new req/s" ratio "ratio range" "base p99 ms" "new p99 ms" "base CPU us" "new CPU us" "CPU ratio"
	for path in $PATHS; do
		b=$(echo "${rps[base-$path]}" | median)
		n=$(echo "${rps[new-$path]}" | median)
		bp=$(echo "${p99[base-$path]}" | median)
		np=$(echo "${p99[new-$path]}" | median)
		r=$(echo "${ratio[$path]}" | median)
		lo=$(echo "${ratio[$path]}" | tr ' ' '\n' | grep -v '^$' | sort -g | head -1)
		hi=$(echo "${ratio[$path]}" | tr ' ' '\n' | grep -v '^$' | sort -g | tail -1)
		bc_=$(echo "${cpu[base-$path]}" | median)
		nc_=$(echo "${cpu[new-$path]}" | median)
		cr=$(echo "${cpuratio[$path]}" | median)
		printf "%-8s %12s %12s %8.2f %6.2f - %5.2f %12s %12s %12s %12s %10.2f\n" "$path" "$b" "$n" "$r" "$lo" "$hi" "$bp" "$np" "$bc_" "$nc_" "$cr"
	done
fi

echo
echo "balance Pick+Done at 64 endpoints, ns/op, one goroutine, $LIB_ROUNDS runs taking turns (go test -bench 'PickDone/.*/n=64\$' -benchtime $LIB_BENCHTIME); medians"
echo
for round in $(seq "$LIB_ROUNDS"); do
	order="base new"
	if ((round % 2 == 0)); then order="new base"; fi
	for side in $order; do
		taskset -c 0 "$out/balance-$side.test" -test.run '^$' -test.bench 'PickDone/.*/n=64$' -test.benchtime "$LIB_BENCHTIME" |
			awk -v side="$side" '/^BenchmarkPickDone/ && $1 !~ /\/parallel/ {n=$1; sub(/^BenchmarkPickDone\//, "", n); sub(/\/n=64.*/, "", n); print side, n, $3}'
	done
done > "$out/pickdone.txt"
printf "%-22s %10s %10s %8s\n" policy base new ratio
for policy in $(awk '{print $2}' "$out/pickdone.txt" | awk '!seen[$0]++'); do
	b=$(awk -v p="$policy" '$1=="base" && $2==p {print $3}' "$out/pickdone.txt" | median)
	n=$(awk -v p="$policy" '$1=="new" && $2==p {print $3}' "$out/pickdone.txt" | median)
	printf "%-22s %10s %10s %8.2f\n" "$policy" "$b" "$n" "$(echo "$n / $b" | bc -l)"
done
