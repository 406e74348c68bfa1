package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/shard"
)

// How long a preferred replica must have been alive before leadership is
// handed to it, and how long to wait after a hand-over failed.
const (
	transferSettle  = 10 * time.Second
	transferBackoff = 30 * time.Second
)

// balanceLeaders moves each shard's leadership to its preferred replica (the
// first in its placement) when that node is alive, so that leadership, and
// with it the work of deciding, spreads over the nodes as placement
// intended rather than piling onto whichever node won the first elections.
// A shard is moved only after this node has led it for a whole tick, and at
// most one per tick, so a node that just recovered gets its shards back
// gradually; the tick is short so that a new cluster settles within seconds
// of its first elections instead of moving leaders under the first load.
func (n *Node) balanceLeaders(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	ledSince := map[int]time.Time{}
	unwell := map[string]time.Time{} // node -> last seen not alive
	failed := map[int]time.Time{}    // shard -> last transfer that failed
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rec, shards := n.record(), n.host.Shards()
		if rec == nil {
			continue
		}
		members := n.gossip.Members()
		now := time.Now()
		for _, info := range rec.Nodes {
			if m := members[info.ID]; m == nil || m.State != memberlist.StateAlive {
				unwell[info.ID] = now
			}
		}
		moved := false
		for s, sh := range shards {
			if sh == nil || !sh.IsLeader() {
				delete(ledSince, s)
				continue
			}
			if _, ok := ledSince[s]; !ok {
				ledSince[s] = time.Now()
				continue
			}
			if s >= len(rec.Placement) {
				continue // a split's child this node opened before it installed the record naming it
			}
			want := rec.Placement[s][0]
			m := members[want]
			if moved || want == n.cfg.NodeID || m == nil || m.State != memberlist.StateAlive || time.Since(ledSince[s]) < every {
				continue
			}
			if st, _ := rec.State(want); st != meta.StateActive {
				continue // leaving or replaced: its replicas are moving away
			}
			if _, moving := rec.MoveOf(s); moving {
				continue // a move hands leadership over itself, if it must
			}
			if _, splitting := rec.SplitOf(s); splitting {
				continue // a hand-over would only make a split step retry
			}
			// Hand over neither to a node back from a pause or a failure
			// moments ago, whose replication may still be stalled, nor
			// again soon after a hand-over failed: a transfer requested
			// while raft's replication to the target is blocked leaves the
			// group refusing writes until it unblocks.
			if now.Sub(unwell[want]) < transferSettle || now.Sub(failed[s]) < transferBackoff {
				continue
			}
			info, _ := rec.Node(want)
			if err := sh.TransferTo(shard.Peer{ID: want, Addr: info.Peer}); err != nil {
				n.log.Debug("leadership transfer to preferred replica", "group", sh.ID(), "to", want, "err", err)
				failed[s] = time.Now()
			}
			delete(ledSince, s)
			moved = true
		}
	}
}
