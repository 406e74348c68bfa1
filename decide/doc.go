// Package decide is one check, from request to answer: the decision core
// that a node and a gateway both run.
//
// A check goes through the Engine in one pass:
//
//  1. Validate the whole request (validate.go), so a bad one is refused
//     with a FieldError naming the field and changes nothing.
//  2. Descriptor checks: resolve the descriptors against the policy set
//     (policy.Snapshot); an emergency block or no matching policy answers
//     here. Every applied policy's buckets become items.
//  3. Route each item's bucket key to its shard (ring, through Shards).
//  4. Leased requests spend from the lease table (lease.Table); what no
//     lease or credit covers is decided strictly.
//  5. Strict items go to their shard's leader through Shards.Submit, one
//     all-or-nothing group per shard for the hard items, shards in
//     parallel, behind a per-shard breaker. A shard that cannot decide in
//     time answers each item's fail mode (bounded by its emergency cap);
//     a shard that a split fenced answers fsm.ErrMoved, and those items
//     wait for the routing and are decided again at the new shard.
//  6. A denied request gives back what the other buckets allowed: in the
//     same entry on the denying shard, by a compensating refund elsewhere
//     (following a split), and to the lease table for local spends.
//  7. The answer names each bucket's and each policy's verdict, the
//     deciding policy and the reason.
//
// The engine holds no protobuf: front ends (package api in a node, the
// SDK in a gateway) translate their wire forms to Request and Answer and
// map this package's errors to their status codes. It reads one clock,
// Config.Clock; deadlines are the context's. In a node, Shards is the
// node's own Raft groups and its peers; in a gateway it is the cluster
// over gRPC.
//
//	e := decide.New(decide.Config{Shards: shards, Policies: set, Lease: &lease.Config{Holder: "n1"}})
//	ans, err := e.Check(ctx, &decide.Request{Items: []decide.Item{{
//		Name: "api", Key: "user:42", Algorithm: fsm.TokenBucket,
//		Limit: 100, Period: time.Minute, HasPeriod: true,
//	}}})
package decide
