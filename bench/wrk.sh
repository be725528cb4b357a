# Shared by the live benchmark scripts: source it, then call
#   wrk_header
#   wrk_row NAME PORT [WRK ARGS...]
# with $out (a folder), $CONNS and $DURATION set. wrk runs on core 1.

wrk_header() {
	echo "wrk -t1 -c$CONNS -d$DURATION --latency (pinned to core 1); proxies on core 0"
	echo
	printf "%-22s %12s %10s %10s %10s\n" target "requests/s" p50 p90 p99
}

wrk_row() {
	local name=$1 port=$2
	shift 2
	local file="$out/wrk-$port.txt"
	taskset -c 1 wrk -t1 -c"$CONNS" -d"$DURATION" --latency "$@" "http://127.0.0.1:$port/" > "$file"
	printf "%-22s %12s %10s %10s %10s %s\n" "$name" \
		"$(awk '/Requests\/sec/ {print $2}' "$file")" \
		"$(awk '$1=="50%" {print $2}' "$file")" \
		"$(awk '$1=="90%" {print $2}' "$file")" \
		"$(awk '$1=="99%" {print $2}' "$file")" \
		"$(awk '/Non-2xx|Socket errors/ {print}' "$file")"
}
