#!/usr/bin/env bash
# bench/compare.sh: the standard load suite against a local three-node
# quorate cluster and, alternating with it, the Redis baseline (Debian's
# redis-server with the standard Lua scripts). Used by "make bench-compare".
#
# It installs redis-server with apt-get if it is missing, starts its own on a
# free loopback port with no persistence, and stops that one process (by its
# pid) when the comparison ends, however it ends. A Redis already running on
# the machine is never touched.
#
# Environment: QUORATE (the binary, default bin/quorate), OUT (the report
# directory). Extra arguments go to "quorate bench".
set -euo pipefail

QUORATE=${QUORATE:-bin/quorate}
OUT=${OUT:-bench/results/$(date -u +%Y%m%d-%H%M%S)-compare}

if ! command -v redis-server >/dev/null 2>&1; then
	echo "bench-compare: installing redis-server (Debian package)" >&2
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

dir=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# listening succeeds when something accepts connections on 127.0.0.1:$1.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A random high port that nothing listens on; if redis-server still cannot
# bind it (taken meanwhile), try another.
for _ in 1 2 3 4 5; do
	port=$((20000 + RANDOM % 40000))
	if listening "$port"; then continue; fi
	redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir" --daemonize no --loglevel warning >"$dir/redis.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		if listening "$port" || ! kill -0 "$pid" 2>/dev/null; then break; fi
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null && listening "$port"; then break; fi
	wait "$pid" 2>/dev/null || true
	pid=""
done
if [ -z "$pid" ]; then
	echo "bench-compare: could not start redis-server:" >&2
	cat "$dir/redis.log" >&2
	exit 1
fi
echo "bench-compare: redis-server (pid $pid) on 127.0.0.1:$port, no persistence" >&2

"$QUORATE" bench --local 3 --suite standard --baseline "redis://127.0.0.1:$port" --out "$OUT" "$@"
