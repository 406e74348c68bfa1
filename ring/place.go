package ring

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
)

// Placement maps a shard to its replica node ids, preferred leader first.
type Placement map[int][]string

// Place returns the replicas of shard among nodes: the min(replicas, distinct
// nodes) nodes of highest weight for the shard, heaviest first, so the first is
// the preferred leader. Ties in weight go to the smaller node id. The result
// depends only on the set of ids: order and duplicates in nodes are ignored,
// and nodes is not modified. Place returns nil if replicas <= 0 or nodes is
// empty.
func Place(shard int, nodes []string, replicas int) []string {
	if replicas <= 0 || len(nodes) == 0 {
		return nil
	}
	return place(shard, distinct(nodes), replicas)
}

// PlaceAll returns the placement of shards 0..shards-1, deduplicating nodes
// once rather than per shard.
func PlaceAll(shards int, nodes []string, replicas int) Placement {
	p := make(Placement, max(shards, 0))
	if replicas <= 0 || len(nodes) == 0 {
		return p
	}
	ids := distinct(nodes)
	for s := range shards {
		p[s] = place(s, ids, replicas)
	}
	return p
}

// Moves returns the number of (shard, node) replica assignments in after that
// are not in before: the replicas a change has to copy to a node. Dropped
// replicas and leader changes cost no copy, so they are not counted.
func Moves(before, after Placement) int {
	n := 0
	for shard, ids := range after {
		for _, id := range ids {
			if !slices.Contains(before[shard], id) {
				n++
			}
		}
	}
	return n
}

// distinct returns the sorted distinct ids in a new slice.
func distinct(nodes []string) []string {
	ids := slices.Clone(nodes)
	slices.Sort(ids)
	return slices.Compact(ids)
}

type candidate struct {
	weight uint64
	id     string
}

// place ranks distinct node ids by weight for shard and keeps the top replicas.
func place(shard int, ids []string, replicas int) []string {
	cs := make([]candidate, len(ids))
	for i, id := range ids {
		cs[i] = candidate{weight(id, shard), id}
	}
	slices.SortFunc(cs, func(a, b candidate) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]string, min(replicas, len(cs)))
	for i := range out {
		out[i] = cs[i].id
	}
	return out
}

// weight is xxhash64(id ‖ shard as 8 big-endian bytes). The shard is a fixed
// 8-byte suffix, so distinct (id, shard) pairs never hash the same bytes. This
// is a contract: changing it moves almost every replica of a running cluster.
func weight(id string, shard int) uint64 {
	var d xxhash.Digest
	d.Reset()
	d.WriteString(id)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(shard))
	d.Write(b[:])
	return d.Sum64()
}
