package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func (m *Metrics) newLogMetrics() {
	m.apply = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_raft_apply_duration_seconds", Help: "Time from proposing a batch to applying it, on the leader.",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 14),
	})
	m.batchOps = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_batch_ops", Help: "Operations carried by one Raft log entry (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 .. 2048
	})
	m.walSyncs = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_wal_records_per_sync", Help: "Records (one group's append or deletion each) carried by one write and fsync of the node's shared log.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 .. 2048
	})
	m.walSyncDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_wal_sync_duration_seconds", Help: "Time to write and fsync one group commit of the node's shared log.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 14), // 25µs .. 200ms
	})
	m.walBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quorate_wal_bytes_total", Help: "Bytes written to the node's shared log.",
	})
	m.reg.MustRegister(m.apply, m.batchOps, m.walSyncs, m.walSyncDur, m.walBytes)
}

// Batch implements shard.Observer.
func (m *Metrics) Batch(ops int, commit time.Duration) {
	m.batchOps.Observe(float64(ops))
	m.apply.Observe(commit.Seconds())
}

// Synced implements raftlog.Observer.
func (m *Metrics) Synced(records, bytes int, d time.Duration) {
	m.walSyncs.Observe(float64(records))
	m.walSyncDur.Observe(d.Seconds())
	m.walBytes.Add(float64(bytes))
}
