// Package ring maps keys to shards and shards to the nodes that replicate them.
//
// It is pure arithmetic: no goroutines, no clocks, no I/O, and no state beyond
// a shard count, so every node that agrees on the shard count and the node list
// computes the same answer without asking anyone.
//
// # Keys to shards
//
// A key is hashed with [keyhash.Sum] (xxhash64) and the 64-bit hash h is mapped to
// shard (h·S) >> 64, the high word of a 128-bit product (Lemire's
// multiply-shift). Unlike h % S this costs no division, and it cuts the hash
// space into S contiguous ranges whose sizes differ by at most one: shard i
// owns [⌈i·2⁶⁴/S⌉, ⌈(i+1)·2⁶⁴/S⌉), reported inclusively by [Ring.Range]. A
// shard is therefore one range of hashes, which is what a snapshot or a
// hand-off needs to name, and doubling S splits every range exactly in two
// (shard i becomes 2i and 2i+1), so a split moves no key between unrelated
// shards.
//
// # Shards to nodes
//
// [Place] uses rendezvous (highest-random-weight) hashing: every node gets a
// weight xxhash64(node id ‖ shard as 8 big-endian bytes), and the replicas are
// the R heaviest nodes, heaviest first (the preferred leader). The answer
// depends only on the set of node ids, not on their order or on any history,
// and needs no virtual nodes or token table to be gossiped.
//
// The weight formula is a contract: changing it reassigns almost every replica
// of a running cluster.
//
// # Movement bound
//
// A node's weight for a shard does not depend on the other nodes, so a
// membership change only moves the replicas it must. Adding a node to n nodes
// changes a shard only when the new node enters its top R, and then only by
// replacing the lightest replica: about shards·R/(n+1) replicas move, all of
// them to the new node. Removing a node changes only the shards it held, each
// by exactly one replica (the next heaviest node takes its place). [Moves]
// counts the replicas a change must copy.
//
// # Planning moves
//
// [Plan] turns a placement into the next steps toward [Place] over the active
// nodes, one replica per shard per step, as a cluster changes membership: a
// [Move] adds a replica before it removes one, so a shard never drops below
// min(R, active nodes) replicas, and the shards with a replica on a departed
// node come first, those down to a bare majority before the rest. Like
// [Place] it is pure, so every node plans the same moves.
package ring
