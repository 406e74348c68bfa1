#!/usr/bin/env bash
# split-shards.sh measures online shard splits under load against the
# make-run cluster: while quorate bench runs strict checks (through n1 and
# n2, 100,000 keys), "quorate split --all" doubles the shard count twice
# (3 -> 6 -> 12). It prints each round's time, from the command to the
# record showing every split done, and the bench's figures over the whole
# run after a baseline: the same bench for 20s before any split.
#
#   make run              # in one terminal (a fresh ./data)
#   scripts/split-shards.sh   # in another, from the repository root
#
# The shards stay split: stop make run and remove ./data to start over.
set -euo pipefail
Q=${Q:-./bin/quorate}
ADDRS=127.0.0.1:7401,127.0.0.1:7402
DURATION=${DURATION:-45}
MODE=${MODE:-strict}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2fs", b - a }'; }
# done <count>: n1's record has count shards and no split in progress.
split_done() {
	local st
	st=$("$Q" status --addr 127.0.0.1:7401 --json 2>/dev/null) || return 1
	echo "$st" | grep -Eq '"splits": +\[$' && return 1 # a non-empty list opens on its line
	echo "$st" | grep -Eq "\"shardCount\": +$1,?\$"
}
split_all() { # split_all <shards after>
	local t0
	t0=$(now)
	"$Q" split --all --addr 127.0.0.1:7401 >/dev/null
	for _ in $(seq 1 600); do
		if split_done "$1"; then
			echo "split --all to $1 shards: $(since "$t0")"
			return
		fi
		sleep 0.05
	done
	echo "split to $1 shards: not done after 30s" >&2
	exit 1
}

bench() {
	"$Q" bench --addrs "$ADDRS" --mode "$MODE" --keys 100000 --limit 1000000 --concurrency 32 --route any --duration "$1" --quiet
}
shards=$("$Q" status --addr 127.0.0.1:7401 --json | grep -Eo '"shardCount": +[0-9]+' | grep -Eo '[0-9]+')
bench 20s >"$tmp/baseline.txt" 2>&1
bench "${DURATION}s" >"$tmp/bench.txt" 2>&1 &
bench=$!
sleep 10
split_all $((shards * 2))
sleep 10
split_all $((shards * 4))
wait "$bench"
echo "baseline (no split):"
grep -E "^SCENARIO|^$MODE  " "$tmp/baseline.txt"
echo "during the splits above:"
grep -E "^$MODE  " "$tmp/bench.txt"
"$Q" status --addr 127.0.0.1:7401 | sed -n '/shard ranges/,/^$/p'
