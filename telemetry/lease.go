package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func (m *Metrics) newLeaseMetrics() {
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
	m.leaseShed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_lease_shed_total",
		Help: "Lease-path work dropped because a bounded queue was full, by queue: grant (a renewal signal; the next round retries), credit_slot (no credit asked for the name).",
	}, []string{"queue"})
	m.reg.MustRegister(m.leaseGrants, m.leaseReturns, m.leaseWait, m.leaseCredits, m.creditDecisions, m.leaseStrict, m.leaseShed)
}

// LeaseTable is what WatchLeases reads (lease.Table).
type LeaseTable interface {
	Held() int64
	Decisions() (hits, misses int64)
}

// WatchLeases exports a lease table's gauges, computed on scrape.
func (m *Metrics) WatchLeases(lt LeaseTable) {
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

// GrantWait, Grant, Returned, Credit, CreditDecision and Shed implement
// lease.Metrics.

func (m *Metrics) GrantWait(d time.Duration) { m.leaseWait.Observe(d.Seconds()) }
func (m *Metrics) Grant(result string)       { m.leaseGrants.WithLabelValues(result).Inc() }
func (m *Metrics) Returned(result string, n int) {
	m.leaseReturns.WithLabelValues(result).Add(float64(n))
}
func (m *Metrics) Credit(result string) { m.leaseCredits.WithLabelValues(result).Inc() }
func (m *Metrics) CreditDecision()      { m.creditDecisions.Inc() }
func (m *Metrics) Shed(queue string)    { m.leaseShed.WithLabelValues(queue).Inc() }

// WatchHealth exports what pages a human, computed on scrape: the shards
// this node replicates that have no leader it knows, and the shards whose
// circuit breaker is open on this node.
func (m *Metrics) WatchHealth(leaderless, openBreakers func() int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "quorate_shards_without_leader", Help: "Shards this node replicates that have no leader it knows of.",
		}, func() float64 { return float64(leaderless()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "quorate_breaker_open_shards", Help: "Shards whose circuit breaker is open on this node: their checks are answered by their fail modes at once.",
		}, func() float64 { return float64(openBreakers()) }),
	)
}
