// Package policy is quorate's policies as data: the model, parsing (YAML and
// JSON, with line and column in errors), validation, the match index and
// the resolution order, pure of Raft, network and clocks.
//
// # The file
//
// A document is {policies: [...]}, a bare list of policies, or one policy.
// JSON is YAML, so both read the same way. Unknown fields are errors
// anywhere, and every error names the file, line, column, policy and field:
//
//	policies.yaml:6:21: policy plan_free: config.rate: "60/mn": unknown unit "mn" (use s, min, h, d or a duration like 5s)
//
// A policy:
//
//	policy_id: plan_free          # required; 1..128 of [a-z0-9_.-]; unique in the set
//	description: "Free plan"
//	layer: TENANT                 # GLOBAL TENANT API_KEY USER ROUTE IP CUSTOM; default from the key
//	kind: PLAN                    # BLOCK OVERRIDE PLAN ROUTE FALLBACK DEFAULT; default from the scope
//	extends: base                 # unset fields are copied from that policy (below)
//	scope: { tenant_tier: FREE }  # which requests it applies to; empty: every request
//	key: [tenant_id]              # what counts separately; empty: one bucket for all
//	shared: true                  # no key on purpose, where the scope selects many subjects
//	algorithm: SLIDING_WINDOW     # TOKEN_BUCKET GCRA SLIDING_WINDOW FIXED_WINDOW SLIDING_LOG
//	                              # LEAKY_BUCKET_POLICING LEAKY_BUCKET_SHAPING (any case)
//	config: { limit: 60/min }
//	mode: HARD                    # HARD (deny), SOFT (allow, report over limit), SHADOW (count, never deny),
//	                              # THROTTLE (delay to the rate, deny past max_delay; below)
//	consistency: STRICT           # STRICT (the shard's Raft group) or LEASED (node-local budget)
//	fail_behavior: FAIL_OPEN      # or FAIL_CLOSED: what a check does while its shard cannot decide
//	emergency_cap: 100/s          # FAIL_OPEN only: a per-node token bucket while the shard cannot decide
//	priority: 0                   # higher wins within a layer and kind
//	enabled: true
//	updated_at: "..."             # set by the server; accepted and ignored on input
//	risk: default                 # or { bands, floor, exempt, max_cut, memory }, below
//	idempotency: { mode: dedupe } # charge (default): every attempt counts; dedupe: a retry is free (STRICT only)
//	rollout: { percent: 10 }      # enforced for 10% of subjects, a shadow for the rest (below)
//	throttle: { max_delay: 2s }   # THROTTLE, or a risk band's action THROTTLE; SOFT adds friction: 50ms
//
// A policy has exactly one of algorithm+config, limits and quota_tree
// (after extends), except a BLOCK policy, which has none and always denies.
// An empty list or mapping means the same as leaving the field out.
//
// rollout: { percent: P, by: [descriptors] } enforces a HARD or SOFT policy
// for P% (0 to 100, 4 decimals) of its subjects and makes it a shadow for
// the others. A subject is the by descriptors' values (default: the first
// limit's key); it is enforced when xxhash64 of the policy id and those
// values, joined by 0x1f, mod 1,000,000 is below P*10,000: the same on every
// node and after restarts, and a larger P keeps every subject a smaller one
// enforced. A request without a by descriptor is not enforced. rollout is
// not copied by extends.
//
// extends copies the parent's fields the child leaves unset (an empty scope
// or key, priority 0 and an unset mode count as unset), except policy_id,
// enabled and updated_at; the limit forms (algorithm+config, limits,
// quota_tree) travel together. Chains may be up to 32 deep; a missing
// parent or a cycle is an error.
//
// config writes a rate in the units people use: rate: 60/min (units s, sec,
// second, m, min, minute, h, hour, d, day, or a Go duration: 10/5s, 5/100ms),
// or limit: with the same syntax, or limit: 100 with period: 1m, or
// refill_per_sec: 50 (0.25 is 1/4s). capacity: (or its synonym burst:) is
// the bucket's capacity, GCRA's burst. Counts are whole and positive. The
// result must be a valid fsm.Limit.
//
// Burst plus sustained: limits: names several limits that must all allow.
// Each is a bucket named policy_id/name and counts by the policy's key unless
// it has its own:
//
//	limits:
//	  - { name: burst,     algorithm: SLIDING_WINDOW, config: { limit: 10/5s } }
//	  - { name: sustained, algorithm: SLIDING_WINDOW, config: { limit: 60/min } }
//
// Hierarchical quotas: quota_tree: is levels a request consumes at every one
// of, or at none. A level without an algorithm takes the previous level's
// (the first one's is SLIDING_WINDOW); its config may be written on the
// level; a level named TENANT, API_KEY, USER, ROUTE or IP without a key
// counts by the key its name implies (tenant_id; tenant_id, api_key_id;
// the level above's plus user_id or route; ip), else by the policy's key.
// Parse writes what the shorthand implies into the policy:
//
//	quota_tree: [{level: TENANT, limit: 50000/min}, {level: API_KEY, limit: 1000/min}]
//
// # Descriptors and matchers
//
// A request describes itself with descriptors: tenant_id, api_key_id,
// user_id, ip, route, method, service, region, tenant_tier, and custom ones
// written custom.<name>. risk_score and idempotency_key are request fields,
// not descriptors. scope: maps a descriptor to a pattern or a list of them
// (any may match):
//
//	"x"          exactly x (method compares case-insensitively)
//	"*"          present, any value
//	"/v1/*"      a prefix
//	10.0.0.0/8   for ip: a CIDR range or an address, IPv4 or IPv6
//	"" or null   absent: how the anonymous fallback says "no api_key_id"
//
// # Resolution
//
// A request is checked against every enabled policy whose scope matches and
// whose key descriptors it all has (a policy counting by api_key_id does not
// apply to a request without one). Within a layer one enforcing policy is
// selected: the best kind, in the order BLOCK, OVERRIDE, PLAN, ROUTE,
// FALLBACK, DEFAULT, then the highest priority. Every selected policy of
// every layer applies, and every matching SHADOW policy is evaluated
// besides, never displacing one. An active emergency Block or a BLOCK
// policy that matches denies before anything else.
//
// Defaults: the layer comes from the key (of the first limit or level):
// ip gives IP, else user_id USER, else api_key_id API_KEY, else route ROUTE,
// else tenant_id TENANT, else a custom one CUSTOM, else GLOBAL. The kind
// comes from the scope: an exact tenant_id, api_key_id or user_id gives
// OVERRIDE, else tenant_tier PLAN, else route ROUTE, else api_key_id absent
// FALLBACK, else DEFAULT.
//
// Snapshot.Review is what an apply says beyond validity: it refuses a new
// or changed policy without a key whose scope selects many subjects (a
// tier, a set or range of tenants, keys, users or addresses: one bucket
// for them all, unless shared: true says so) and LEASED with idempotency
// dedupe (only the shard can deduplicate), and warns of a route-scoped
// policy whose layer was inferred as another and of one that can never
// decide.
//
// A set is refused, with a message naming both policies, for a duplicate
// policy_id, extends naming a missing policy or forming a cycle, and two
// enabled, non-shadow policies of one layer, kind and priority that can match
// the same request.
//
// # Risk
//
// risk: cuts every limit of the policy by the request's risk_score: the
// highest band the score falls in cuts by its cut (bounded by max_cut if
// set), to max(floor, ceil(limit × (1 − cut))), never above the limit
// itself; a set capacity is cut the same way. A band is { min: M } for
// scores at or above M, or { above: A } for scores strictly above A. A
// request without a score, or matching an exempt subject
// (descriptor=value), is not cut. risk: default is the guide's bands,
// above 0.9 cut by 80%, 0.7 to 0.9 by 40%:
//
//	bands: [ { above: 0.9, cut: 0.8 }, { min: 0.7, cut: 0.4 } ]
//	floor: 1
//
// memory: { half_life: 10m, by: [ip] } remembers a subject's score (by
// default the policy's key): the score that counts is the larger of the
// request's and the remembered one, halved every half_life (1s to 24h), so
// a subject that scored high keeps its cut for a while even when its
// requests carry no score or a lower one. The memory is each node's own
// (DefaultRiskMemory subjects at most, the weakest forgotten first and
// counted in quorate_risk_memory_forgotten_total); dry runs and explain read
// it without teaching it.
//
// # Throttle
//
// mode: THROTTLE holds a request over the rate instead of denying it. Each
// bucket of the policy is decided by the state machine's shaper
// (LEAKY_BUCKET_SHAPING) at the policy's rate, which schedules every unit
// one interval (period / limit) after the last: a request within the
// capacity passes at once, one over it is answered THROTTLE with the wait
// until its turn, and one whose turn is more than throttle.max_delay away is
// denied. Callers that wait their delay arrive at exactly the rate. The
// capacity is the burst admitted without a wait (LEAKY_BUCKET_SHAPING
// queues every unit: burst 1). A throttled bucket cannot be leased.
//
//	mode: THROTTLE
//	algorithm: GCRA
//	config: { rate: 10/s, burst: 1 }
//	throttle: { max_delay: 2s }    # waits 0, 100ms, 200ms, ... 2s, then DENY
//
// A SOFT policy with throttle: { friction: 50ms, max_delay: 1s } is never
// denied either, but a request over its limit is answered THROTTLE with
// friction per unit over the limit (the units queued past the capacity,
// draining at the rate), at most max_delay: friction that grows with the
// overage instead of only counting it.
//
// A risk band with action: THROTTLE makes a HARD policy throttle the
// requests in that band (after the band's cut) instead of denying them; the
// policy then needs throttle.max_delay. The throttled requests queue in
// the policy's shaper, apart from its other requests' bucket.
//
// # Use
//
//	ps, err := policy.Parse("policies.yaml", data)
//	snap, err := policy.Compile(ps, blocks, version)
//	res := snap.Resolve(&policy.Request{TenantID: "t_1", TenantTier: "FREE"}, now)
//
// A Snapshot is immutable and indexed: Resolve looks up the policies under
// the request's exact values and scans only those without an exact matcher.
// ApplySet, Delete and Diff compute and show the next set. Every refusal
// wraps ErrInvalid (Delete of an unknown id, ErrNotFound) and changes nothing.
package policy
