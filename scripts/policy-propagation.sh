#!/usr/bin/env bash
# policy-propagation.sh measures how long a policy change takes to decide
# checks on every node of a loaded cluster: quorate bench runs strict checks
# against the make-run cluster while `quorate policy apply --wait` changes
# plan_free CHANGES times (through each node in turn), and the slowest
# node's time per change is summarized.
#
#   make run                        # in one terminal
#   scripts/policy-propagation.sh   # in another, from the repository root
set -euo pipefail
CHANGES=${CHANGES:-100}
Q=${Q:-./bin/quorate}
ADDRS=127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$Q" bench --addrs "$ADDRS" --keys 100000 --limit 1000000 --concurrency 64 \
	--duration "$((CHANGES / 2 + 15))s" >"$tmp/bench.txt" 2>&1 &
bench=$!
sleep 5
for i in $(seq 1 "$CHANGES"); do
	cat >"$tmp/p.yaml" <<YAML
policies:
  - policy_id: plan_free
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    limits:
      - { name: burst,     algorithm: SLIDING_WINDOW, config: { limit: 10/5s } }
      - { name: sustained, algorithm: SLIDING_WINDOW, config: { limit: $((60 + i))/min } }
YAML
	"$Q" policy apply -f "$tmp/p.yaml" --addr "127.0.0.1:740$((i % 3 + 1))" | grep "live on" >>"$tmp/live.txt"
	sleep 0.3
done
wait "$bench"
grep -E "^SCENARIO|^strict  " "$tmp/bench.txt"
# Each line: "live on n1 after 12ms, n2 after 15ms, ..."; the change is in
# force everywhere at the slowest node's time.
awk '{ worst = 0
	for (i = 1; i <= NF; i++) if ($i == "after") { v = $(i + 1); sub(/,$/, "", v)
		ms = (v ~ /ms$/) ? v + 0 : (v ~ /µs$/) ? v / 1000 : v * 1000; if (ms > worst) worst = ms }
	print worst }' "$tmp/live.txt" | sort -n | awk '{ a[NR] = $1 } END {
	printf "%d changes, slowest node per change: p50 %dms, p90 %dms, p99 %dms, max %dms\n",
		NR, a[int(NR * 0.5)], a[int(NR * 0.9)], a[int(NR * 0.99)], a[NR] }'
