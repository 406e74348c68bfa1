package cluster

import (
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/cluster/meta"
)

// underReplicated lists the shards of rec with fewer live replicas than
// the replication factor, a replica being live while its node is a member
// and gossip reports it alive (suspect counts as alive: it may be a slow
// probe). After a failure it counts down as the mover rebuilds replicas.
func underReplicated(rec *meta.Record, members map[string]*memberlist.Node) []uint32 {
	if rec == nil {
		return nil
	}
	var out []uint32
	for s, reps := range rec.Placement {
		live := 0
		for _, id := range reps {
			if m := members[id]; m != nil && rec.Member(id) && (m.State == memberlist.StateAlive || m.State == memberlist.StateSuspect) {
				live++
			}
		}
		if live < rec.Replicas {
			out = append(out, uint32(s))
		}
	}
	return out
}

// watchReplication exports the count of under-replicated shards, computed
// on scrape.
func (n *Node) watchReplication() {
	n.metrics.Registry().MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "quorate_shards_under_replicated",
		Help: "Shards with fewer live replicas (on nodes gossip reports alive or suspect) than the replication factor, as this node sees them.",
	}, func() float64 {
		n.mu.RLock()
		rec := n.mu.rec
		n.mu.RUnlock()
		if n.gossip == nil {
			return 0
		}
		return float64(len(underReplicated(rec, n.gossip.Members())))
	}))
}

// countSuppressedRaftLogs exports how many raft errors about unreachable
// peers were counted instead of logged (shard's peer log).
func (n *Node) countSuppressedRaftLogs() {
	n.metrics.Registry().MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "quorate_raft_log_suppressed_total",
		Help: "Raft errors about an unreachable peer not logged: the peer is reported once, then summarized every 30s.",
	}, func() float64 { return float64(n.host.SuppressedRaftLogs()) }))
}

// observeRecord reports the record's shape.
func (n *Node) observeRecord(rec *meta.Record) {
	members := map[string]int{} // every state gets its series, 0 included
	for _, st := range []string{meta.StateActive, meta.StateLeaving, meta.StateLeft, meta.StateRemoved} {
		members[meta.StateName(st)] = 0
	}
	for _, x := range rec.Nodes {
		members[meta.StateName(x.State)]++
	}
	n.metrics.Record(rec.Epoch, rec.Shards, len(rec.Moves), len(rec.Splits), members)
}
