package ring

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/quorate/quorate/keyhash"
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

// Ring maps keys to shards. It is immutable after New or NewSplit and safe
// for concurrent use; the zero Ring has no shards.
type Ring struct {
	shards uint64 // in [1, MaxShards]
	// table, once a shard has split, holds the routed shards' ranges by
	// ascending low bound; nil means the uniform ranges of New.
	table []Bound
}

// Bound is where a shard's range starts: the shard owns the hashes from Lo
// up to the next Bound's Lo (exclusive), or to the top of the hash space.
type Bound struct {
	Lo    uint64 `json:"lo"`
	Shard int    `json:"shard"`
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

// ShardFor returns the shard that owns key. It is ShardForHash(keyhash.Sum(key)).
func (r *Ring) ShardFor(key string) int {
	return r.ShardForHash(keyhash.Sum(key))
}

// ShardForHash returns the shard whose range holds h: the high word of h·S,
// or after splits the table's bound at or below h. Callers that already hold
// a key's hash use it to avoid hashing twice.
func (r *Ring) ShardForHash(h uint64) int {
	if r.table != nil {
		// The last bound with Lo <= h; the first bound's Lo is 0.
		i, _ := slices.BinarySearchFunc(r.table, h, func(b Bound, h uint64) int { return cmp.Compare(b.Lo, h) })
		if i == len(r.table) || r.table[i].Lo > h {
			i--
		}
		return r.table[i].Shard
	}
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
	if r.table != nil {
		lo, hi, _ = r.Routed(shard)
		return lo, hi
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

// Bounds returns the routed shards' bounds in ascending order of Lo: the
// table of a split ring, or the uniform ranges of New.
func (r *Ring) Bounds() []Bound {
	if r.table != nil {
		return slices.Clone(r.table)
	}
	out := make([]Bound, r.shards)
	for s := range out {
		out[s] = Bound{Lo: r.start(s), Shard: s}
	}
	return out
}

// Routed returns the range shard owns and true, or false when no key routes
// to it (a shard whose split has not finished yet).
func (r *Ring) Routed(shard int) (lo, hi uint64, ok bool) {
	if r.table == nil {
		if shard < 0 || shard >= r.Shards() {
			return 0, 0, false
		}
		lo, hi = r.Range(shard)
		return lo, hi, true
	}
	for i, b := range r.table {
		if b.Shard != shard {
			continue
		}
		hi = math.MaxUint64
		if i+1 < len(r.table) {
			hi = r.table[i+1].Lo - 1
		}
		return b.Lo, hi, true
	}
	return 0, 0, false
}

// NewSplit returns a Ring of shards shards of which those in bounds are
// routed, each from its Lo: the ranges after splits. Shards not in bounds
// exist (their groups are being filled) but own no keys. bounds must start
// at 0, and name each shard at most once, with distinct Lo.
func NewSplit(shards int, bounds []Bound) (*Ring, error) {
	if shards < 1 || shards > MaxShards {
		return nil, fmt.Errorf("%w: %d, want 1 to %d", ErrShardCount, shards, MaxShards)
	}
	t := slices.Clone(bounds)
	slices.SortFunc(t, func(a, b Bound) int { return cmp.Compare(a.Lo, b.Lo) })
	if len(t) == 0 || t[0].Lo != 0 {
		return nil, errors.New("ring: the ranges must start at hash 0")
	}
	seen := make(map[int]bool, len(t))
	for i, b := range t {
		if b.Shard < 0 || b.Shard >= shards || seen[b.Shard] {
			return nil, fmt.Errorf("ring: shard %d routed twice or out of range [0, %d)", b.Shard, shards)
		}
		if i > 0 && b.Lo == t[i-1].Lo {
			return nil, fmt.Errorf("ring: shards %d and %d start at the same hash", t[i-1].Shard, b.Shard)
		}
		seen[b.Shard] = true
	}
	return &Ring{shards: uint64(shards), table: t}, nil
}
