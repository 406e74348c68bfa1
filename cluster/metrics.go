package cluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/quorate/quorate/lease"
)

// metrics are the node's Prometheus metrics, on a registry of its own.
type metrics struct {
	reg *prometheus.Registry

	checks      *prometheus.CounterVec   // per item: mode, decision, reason
	requests    *prometheus.CounterVec   // per request: mode, decision
	latency     *prometheus.HistogramVec // per request: mode
	apply       prometheus.Histogram     // proposal to application, per batch
	batchOps    prometheus.Histogram     // operations per log entry
	forwards    *prometheus.CounterVec   // result
	unavailable *prometheus.CounterVec   // fail mode
	leaderChg   *prometheus.CounterVec   // group
	leader      *prometheus.GaugeVec     // group: 1 while this node leads it
	refunds     *prometheus.CounterVec   // result

	leaseGrants  *prometheus.CounterVec // result: acquired, renewed, empty, error
	leaseReturns *prometheus.CounterVec // result
	leaseWait    prometheus.Histogram   // grant round trip
	leaseStrict  prometheus.Counter     // leased items no grant covered

	leaseCredits    *prometheus.CounterVec // result: granted, refused, error
	creditDecisions prometheus.Counter     // leased items decided from a credit
	leaseShed       *prometheus.CounterVec // queue: lease-path work shed (leased.go)

	walSyncs   prometheus.Histogram // records per fsync of the shared log
	walSyncDur prometheus.Histogram // write plus fsync time
	walBytes   prometheus.Counter

	queueMetrics  // queues.go
	policyMetrics // policymetrics.go
	moveMetrics   // replication.go
}

// Synced implements raftlog.Observer.
func (m *metrics) Synced(records, bytes int, d time.Duration) {
	m.walSyncs.Observe(float64(records))
	m.walSyncDur.Observe(d.Seconds())
	m.walBytes.Add(float64(bytes))
}

// watchLeases exports the lease table's gauges, computed on scrape.
func (m *metrics) watchLeases(lt *lease.Table) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "quorate_lease_budget_held", Help: "Units of budget this node holds in leases, all buckets.",
		}, func() float64 { return float64(lt.Held()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "quorate_leased_local_hits_total", Help: "Leased checks decided from local budget.",
		}, func() float64 { h, _ := lt.Decisions(); return float64(h) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "quorate_leased_local_misses_total", Help: "Leased checks that needed a grant or the strict path.",
		}, func() float64 { _, mi := lt.Decisions(); return float64(mi) }),
	)
}

// GrantWait, Grant, Returned, Credit and CreditDecision implement
// lease.Metrics.
var _ lease.Metrics = (*metrics)(nil)

func (m *metrics) GrantWait(d time.Duration) { m.leaseWait.Observe(d.Seconds()) }
func (m *metrics) Grant(result string)       { m.leaseGrants.WithLabelValues(result).Inc() }
func (m *metrics) Returned(result string, n int) {
	m.leaseReturns.WithLabelValues(result).Add(float64(n))
}
func (m *metrics) Credit(result string) { m.leaseCredits.WithLabelValues(result).Inc() }
func (m *metrics) CreditDecision()      { m.creditDecisions.Inc() }

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_checks_total", Help: "Items decided, by mode, decision and reason.",
	}, []string{"mode", "decision", "reason"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_check_requests_total", Help: "Check requests answered, by mode and overall decision.",
	}, []string{"mode", "decision"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "quorate_check_duration_seconds", Help: "Time to answer a Check request.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs .. 1.6s
	}, []string{"mode"})
	m.apply = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_raft_apply_duration_seconds", Help: "Time from proposing a batch to applying it, on the leader.",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 14),
	})
	m.batchOps = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_batch_ops", Help: "Operations carried by one Raft log entry (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 .. 2048
	})
	m.forwards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_forwards_total", Help: "Shard batches forwarded to another node's leader, by result.",
	}, []string{"result"})
	m.unavailable = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_unavailable_total", Help: "Items decided by their fail mode because their shard could not decide in time.",
	}, []string{"fail"})
	m.leaderChg = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_leader_changes_total", Help: "Leader changes observed by this node, by group.",
	}, []string{"group"})
	m.leader = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quorate_group_leader", Help: "1 while this node leads the group.",
	}, []string{"group"})
	m.refunds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_cross_shard_refunds_total", Help: "Compensating refunds sent when a multi-shard request was denied, by result.",
	}, []string{"result"})
	m.leaseGrants = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_lease_grants_total", Help: "Lease grant requests by result: acquired, renewed, empty (bucket exhausted), error.",
	}, []string{"result"})
	m.leaseReturns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_lease_returns_total", Help: "Unused lease budgets returned, by result.",
	}, []string{"result"})
	m.leaseWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "quorate_lease_grant_duration_seconds", Help: "Time to obtain a lease grant from the shard leader.",
		Buckets: prometheus.ExponentialBuckets(100e-6, 2, 14),
	})
	m.leaseCredits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_lease_credits_total", Help: "Shard credit requests by result: granted, refused (the shard's quota per window is used), error.",
	}, []string{"result"})
	m.creditDecisions = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quorate_leased_credit_decisions_total", Help: "Leased checks on keys this node held no lease for, allowed from its shard credit.",
	})
	m.leaseStrict = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quorate_leased_strict_fallbacks_total",
		Help: "Leased checks that no grant covered, decided by a strict check instead.",
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
	m.reg.MustRegister(m.checks, m.requests, m.latency, m.apply, m.batchOps, m.forwards,
		m.unavailable, m.leaderChg, m.leader, m.refunds, m.leaseGrants, m.leaseReturns, m.leaseWait, m.leaseStrict,
		m.leaseCredits, m.creditDecisions, newLeaseShed(&m.leaseShed), m.walSyncs, m.walSyncDur, m.walBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.queueMetrics.register(m.reg)
	m.policyMetrics.register(m.reg)
	m.moveMetrics.register(m.reg)
	return m
}

// Batch implements shard.Observer.
func (m *metrics) Batch(ops int, commit time.Duration) {
	m.batchOps.Observe(float64(ops))
	m.apply.Observe(commit.Seconds())
}
