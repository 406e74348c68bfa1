// Package keyhash is the hash of a bucket key that every part of quorate
// must agree on.
//
// The contract: Sum(key) is xxhash64 of the key's bytes, seed 0, and never
// changes. The state machine (fsm) stores a bucket under it, the ring
// routes a key to the shard whose range holds it, a split moves the
// buckets whose Sum falls in the child's range, the lease table indexes
// its entries by it, and a credit's Bloom filter holds it. A node that
// hashed differently from its peers would route a key to one shard and
// find its state in another, so there is exactly one definition, here.
// Changing it is a new on-disk and wire format.
package keyhash

import "github.com/cespare/xxhash/v2"

// Sum returns the hash of key. It does not allocate, so the check path can
// hash every bucket key.
func Sum(key string) uint64 { return xxhash.Sum64String(key) }
