package ring

import (
	"errors"
	"fmt"
	"math"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// MaxShards bounds the shard count. Every shard is a Raft group hosted on R
// nodes, so the count is kept small enough for each node to run its share of
// groups; it is also far below the point where ranges would get uneven.
const MaxShards = 4096

var (
	// ErrShardCount is returned by New for a shard count outside
	// [1, MaxShards].
	ErrShardCount = errors.New("ring: shard count out of range")
)

// Hash returns the xxhash64 of key. It does not allocate, so the check path
// can hash every bucket key.
func Hash(key string) uint64 {
	return xxhash.Sum64String(key)
}

// Ring maps keys to a fixed number of shards. It is immutable after New and
// safe for concurrent use. Use New; the zero Ring has no shards.
type Ring struct {
	shards uint64 // in [1, MaxShards]
}

// New returns a Ring of shards shards. The shard count is fixed for the life
// of a cluster's data: changing it moves most keys, except that doubling it
// splits every shard in two.
func New(shards int) (*Ring, error) {
	if shards < 1 || shards > MaxShards {
		return nil, fmt.Errorf("%w: %d, want 1 to %d", ErrShardCount, shards, MaxShards)
	}
	return &Ring{shards: uint64(shards)}, nil
}

// Shards returns the number of shards.
func (r *Ring) Shards() int {
	return int(r.shards)
}

// ShardFor returns the shard that owns key. It is ShardForHash(Hash(key)).
func (r *Ring) ShardFor(key string) int {
	return r.ShardForHash(Hash(key))
}

// ShardForHash returns the shard whose range holds h: the high word of h·S.
// Callers that already hold a key's hash use it to avoid hashing twice.
func (r *Ring) ShardForHash(h uint64) int {
	hi, _ := bits.Mul64(h, r.shards)
	return int(hi)
}

// Range returns the inclusive bounds of the hashes shard owns, so that
// ShardForHash(h) == shard exactly when lo <= h <= hi. The ranges of shards
// 0..S-1 are in order and cover every uint64 once. Range panics if shard is
// not in [0, Shards()), like an index out of range.
func (r *Ring) Range(shard int) (lo, hi uint64) {
	if shard < 0 || shard >= r.Shards() {
		panic(fmt.Sprintf("ring: shard %d out of range [0, %d)", shard, r.shards))
	}
	lo = r.start(shard)
	if shard == r.Shards()-1 {
		return lo, math.MaxUint64
	}
	return lo, r.start(shard+1) - 1
}

// start returns the least h with ShardForHash(h) >= shard, for shard in
// [0, S): h·S >= shard·2⁶⁴ exactly when h >= ⌈shard·2⁶⁴/S⌉.
func (r *Ring) start(shard int) uint64 {
	q, rem := bits.Div64(uint64(shard), 0, r.shards) // shard < S, so no overflow
	if rem != 0 {
		q++
	}
	return q
}
