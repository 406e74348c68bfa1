#!/usr/bin/env bash
# membership-moves.sh measures membership changes under load against the
# make-run cluster: while quorate bench runs strict checks (through n1 and
# n2), a fourth node (n4) joins and replicas move to it; n4 leaves; n4
# joins again with a new data dir; then n3 is killed with -9 and left dead
# past the dead-node grace, so its replicas are rebuilt on the three
# others. It prints each step's time and the bench's figures (errors and
# latency over the whole run, moves included), after a baseline: the same
# bench for 20s before any change.
#
#   make run AGENT_FLAGS="--dead-node-grace 10s"   # in one terminal
#   scripts/membership-moves.sh                     # in another, from the repository root
#
# n3 stays replaced: stop make run and remove ./data before using it again.
set -euo pipefail
Q=${Q:-./bin/quorate}
CRED=${CRED:-./data/credentials}
ADDRS=127.0.0.1:7401,127.0.0.1:7402
DURATION=${DURATION:-90}
tmp=$(mktemp -d)
n4=""
cleanup() {
	[ -n "$n4" ] && kill "$n4" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }
# settled: n1 reports no move in progress and no shard under-replicated,
# every node named in $1 (space-separated) holds a replica and the node $2
# (if any) none.
settled() {
	local st
	st=$("$Q" status --addr 127.0.0.1:7401 --json 2>/dev/null) || return 1
	# A non-empty list opens on its line; an empty one is [] (protojson).
	echo "$st" | grep -Eq '"(moves|underReplicated)": +\[$' && return 1
	for id in $1; do
		echo "$st" | sed -n '/"shards"/,$p' | grep -q "\"$id\"" || return 1
	done
	[ -z "${2:-}" ] || ! echo "$st" | sed -n '/"shards"/,$p' | grep -q "\"$2\""
}
await() { # await <start> <nodes that hold replicas> <node that holds none> <what>
	local t0=$1 nodes=$2 gone=$3 what=$4
	for _ in $(seq 1 600); do
		if settled "$nodes" "$gone"; then
			echo "$what: $(since "$t0")"
			return
		fi
		sleep 0.2
	done
	echo "$what: not settled after 120s" >&2
	exit 1
}

"$Q" gen node --ca-cert "$CRED/ca.crt" --ca-key "$CRED/ca.key" --id n4 --hosts 127.0.0.1 --out "$tmp" >/dev/null
bench() {
	"$Q" bench --addrs "$ADDRS" --keys 100000 --limit 1000000 --concurrency 32 --route any --duration "$1" --quiet
}
bench 20s >"$tmp/baseline.txt" 2>&1
bench "${DURATION}s" >"$tmp/bench.txt" 2>&1 &
bench=$!
sleep 5

start_n4() {
	"$Q" agent --node-id n4 --data "$1" --rpc 127.0.0.1:7404 --peer 127.0.0.1:7604 \
		--http 127.0.0.1:7504 --gossip 127.0.0.1:7304 --join 127.0.0.1:7301 \
		--tls-cert "$tmp/n4.crt" --tls-key "$tmp/n4.key" --tls-ca "$CRED/ca.crt" \
		--tokens-file "$CRED/tokens" --gossip-keyring "$CRED/gossip.keyring" >>"$tmp/n4.log" 2>&1 &
	n4=$!
}
t0=$(now)
start_n4 "$tmp/n4a"
await "$t0" "n1 n2 n3 n4" "" "n4 joined, replicas moved to it"
sleep 5

t0=$(now)
"$Q" leave --addr 127.0.0.1:7404 >/dev/null
await "$t0" "n1 n2 n3" n4 "n4 left, its replicas moved back"
wait "$n4" || true
sleep 5

t0=$(now)
start_n4 "$tmp/n4b"
await "$t0" "n1 n2 n3 n4" "" "n4 joined again with an empty data dir"
sleep 5

n3=$(pgrep -f -- "--node-id n3 " | head -1)
t0=$(now)
kill -9 "$n3"
await "$t0" "n1 n2 n4" n3 "n3 killed -9, every shard back to 3 replicas on the others (grace included)"
wait "$bench"
echo "baseline (no change):"
grep -E "^SCENARIO|^strict  " "$tmp/baseline.txt"
echo "during the changes above:"
grep -E "^strict  " "$tmp/bench.txt"
