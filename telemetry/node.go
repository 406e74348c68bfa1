package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The node's own metrics: who leads its groups, the meta leader's replica
// moves and splits, and the shape of the cluster record it follows.
type nodeMetrics struct {
	leaderChg *prometheus.CounterVec // group
	leader    *prometheus.GaugeVec   // group: 1 while this node leads it

	moves           *prometheus.CounterVec // outcome: started, done, aborted, retried
	moveSeconds     prometheus.Histogram
	splits          *prometheus.CounterVec // outcome: started, done, retried
	splitSeconds    prometheus.Histogram
	inProgress      prometheus.Gauge
	splitInProgress prometheus.Gauge
	shardCount      prometheus.Gauge
	members         *prometheus.GaugeVec // state
	epoch           prometheus.Gauge
}

func (m *nodeMetrics) register(reg prometheus.Registerer) {
	m.leaderChg = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_leader_changes_total", Help: "Leader changes observed by this node, by group.",
	}, []string{"group"})
	m.leader = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quorate_group_leader", Help: "1 while this node leads the group.",
	}, []string{"group"})
	m.moves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_replica_moves_total",
		Help: "Replica moves run by this node as meta leader, by outcome: started, done, aborted (the node it added went away), retried (a step failed).",
	}, []string{"outcome"})
	m.moveSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_replica_move_duration_seconds", Help: "Time to move one replica: add as non-voter, catch up, promote, remove.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12), // 50ms .. 100s
	})
	m.splits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_shard_splits_total",
		Help: "Shard splits run by this node as meta leader, by outcome: started, done, retried (a step failed).",
	}, []string{"outcome"})
	m.splitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_shard_split_duration_seconds", Help: "Time to split one shard: fence the range, copy it into the new group, release it.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	})
	m.inProgress = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_replica_moves_in_progress", Help: "Replica moves the cluster record holds in progress.",
	})
	m.splitInProgress = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_shard_splits_in_progress", Help: "Shard splits the cluster record holds in progress.",
	})
	m.shardCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_shards", Help: "Shards in the cluster record, including the children of splits in progress.",
	})
	m.members = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quorate_members", Help: "Nodes in the cluster record, by state: active, leaving, left, removed.",
	}, []string{"state"})
	m.epoch = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_record_epoch", Help: "Epoch of the cluster record this node follows; every membership or placement change bumps it.",
	})
	reg.MustRegister(m.leaderChg, m.leader, m.moves, m.moveSeconds, m.splits, m.splitSeconds,
		m.inProgress, m.splitInProgress, m.shardCount, m.members, m.epoch)
}

// Leader counts a leader change of group and whether this node leads it
// now; Forget drops the group's gauge (the node left it).
func (m *nodeMetrics) Leader(group string, self bool) {
	m.leaderChg.WithLabelValues(group).Inc()
	lead := 0.0
	if self {
		lead = 1
	}
	m.leader.WithLabelValues(group).Set(lead)
}

// Forget drops a group the node no longer holds.
func (m *nodeMetrics) Forget(group string) { m.leader.DeleteLabelValues(group) }

// Move counts a replica move by outcome ("started", "done", "aborted",
// "retried"); a finished one with its duration.
func (m *nodeMetrics) Move(outcome string, took time.Duration) {
	m.moves.WithLabelValues(outcome).Inc()
	if took > 0 {
		m.moveSeconds.Observe(took.Seconds())
	}
}

// Splits counts n shard splits by outcome ("started", "done",
// "retried"); a finished one with its duration.
func (m *nodeMetrics) Splits(outcome string, n int, took time.Duration) {
	m.splits.WithLabelValues(outcome).Add(float64(n))
	if took > 0 {
		m.splitSeconds.Observe(took.Seconds())
	}
}

// Record reports the shape of the cluster record the node follows.
func (m *nodeMetrics) Record(epoch uint64, shards, moves, splits int, members map[string]int) {
	m.epoch.Set(float64(epoch))
	m.shardCount.Set(float64(shards))
	m.inProgress.Set(float64(moves))
	m.splitInProgress.Set(float64(splits))
	for state, c := range members {
		m.members.WithLabelValues(state).Set(float64(c))
	}
}
