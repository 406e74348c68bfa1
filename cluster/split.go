package cluster

import (
	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/shard"
)

// Splitting a shard (meta/split.go has the record's side): the splits an
// operator asks for (SplitShards), and the groups a split's child opens
// with. The mover runs them (splitter.go).

// splitBoot returns the servers to bootstrap shard s with on this node: a
// child of a split in progress is a new group on its placement (every
// replica bootstraps it alike; a group with state ignores it), any other
// group none (its leader adds the node).
func (n *Node) splitBoot(rec *meta.Record, s int) []shard.Peer {
	if sp, ok := rec.SplitOf(s); ok && sp.Child == s {
		return peersOf(rec, rec.Placement[s])
	}
	return nil
}
