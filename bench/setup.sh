# Shared by the live benchmark scripts: source it, then call
#   setup NAME
# for a fresh bench/out/NAME (in $out) with rotor and bench/upstream built
# into it. Every process whose pid is added to pids is killed when the
# script exits, and every file added to tmpfiles removed.
setup() {
	out=bench/out/$1
	rm -rf "$out" && mkdir -p "$out"
	go build -o "$out/rotor" ./cmd/rotor
	go build -o "$out/upstream" ./bench/upstream
	pids=()
	tmpfiles=()
	trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -f "${tmpfiles[@]}"' EXIT
}
