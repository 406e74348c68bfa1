package cluster

import (
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// underReplicated lists the shards of rec with fewer live replicas than
// the replication factor, a replica being live while gossip reports its
// node alive (suspect counts as alive: it may be a slow probe). Until
// membership changes replace dead nodes (docs/membership.md), this is
// what an operator watches after a failure.
func underReplicated(rec *record, members map[string]*memberlist.Node) []uint32 {
	if rec == nil {
		return nil
	}
	var out []uint32
	for s, reps := range rec.Placement {
		live := 0
		for _, id := range reps {
			if m := members[id]; m != nil && (m.State == memberlist.StateAlive || m.State == memberlist.StateSuspect) {
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
	n.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "quorate_shards_under_replicated",
		Help: "Shards with fewer live replicas (on nodes gossip reports alive or suspect) than the replication factor, as this node sees them.",
	}, func() float64 {
		n.mu.RLock()
		rec := n.mu.rec
		n.mu.RUnlock()
		if n.gossip == nil {
			return 0
		}
		return float64(len(underReplicated(rec, n.gossip.members())))
	}))
}
