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
		return float64(len(underReplicated(rec, n.gossip.members())))
	}))
}

// moveMetrics count the mover's work (mover.go) and the record's shape.
type moveMetrics struct {
	moves       *prometheus.CounterVec // outcome: started, done, aborted, retried
	moveSeconds prometheus.Histogram
	inProgress  prometheus.Gauge
	members     *prometheus.GaugeVec // state
	epoch       prometheus.Gauge

	splits          *prometheus.CounterVec // outcome: started, done, retried
	splitSeconds    prometheus.Histogram
	splitInProgress prometheus.Gauge
	shardCount      prometheus.Gauge
}

func (m *moveMetrics) register(reg prometheus.Registerer) {
	m.moves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_replica_moves_total",
		Help: "Replica moves run by this node as meta leader, by outcome: started, done, aborted (the node it added went away), retried (a step failed).",
	}, []string{"outcome"})
	m.moveSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_replica_move_duration_seconds", Help: "Time to move one replica: add as non-voter, catch up, promote, remove.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12), // 50ms .. 100s
	})
	m.inProgress = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_replica_moves_in_progress", Help: "Replica moves the cluster record holds in progress.",
	})
	m.members = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quorate_members", Help: "Nodes in the cluster record, by state: active, leaving, left, removed.",
	}, []string{"state"})
	m.epoch = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_record_epoch", Help: "Epoch of the cluster record this node follows; every membership or placement change bumps it.",
	})
	m.splits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_shard_splits_total",
		Help: "Shard splits run by this node as meta leader, by outcome: started, done, retried (a step failed).",
	}, []string{"outcome"})
	m.splitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_shard_split_duration_seconds", Help: "Time to split one shard: fence the range, copy it into the new group, release it.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
	m.splitInProgress = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_shard_splits_in_progress", Help: "Shard splits the cluster record holds in progress.",
	})
	m.shardCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_shards", Help: "Shards in the cluster record, including the children of splits in progress.",
	})
	reg.MustRegister(m.moves, m.moveSeconds, m.inProgress, m.members, m.epoch, m.splits, m.splitSeconds, m.splitInProgress, m.shardCount)
}

func (m *moveMetrics) observeRecord(rec *meta.Record) {
	m.inProgress.Set(float64(len(rec.Moves)))
	m.splitInProgress.Set(float64(len(rec.Splits)))
	m.shardCount.Set(float64(rec.Shards))
	m.epoch.Set(float64(rec.Epoch))
	counts := map[string]int{meta.StateActive: 0, meta.StateLeaving: 0, meta.StateLeft: 0, meta.StateRemoved: 0}
	for _, n := range rec.Nodes {
		counts[n.State]++
	}
	for st, c := range counts {
		m.members.WithLabelValues(meta.StateName(st)).Set(float64(c))
	}
}
