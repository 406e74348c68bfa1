// Package telemetry is what a quorate process reports about itself: the
// Prometheus metrics of its decisions, leases, shared log and queues, on a
// registry of its own.
//
// Its methods take metric label values (stable strings) and numbers, so
// the packages that report (decide, lease, shard, raftlog) name nothing
// here and this package names nothing of theirs: a node (cluster.Run)
// gives one Metrics to each as its observer.
package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are a process's metrics. Use New.
type Metrics struct {
	reg *prometheus.Registry

	checks      *prometheus.CounterVec   // per item: mode, decision, reason
	requests    *prometheus.CounterVec   // per request: mode, decision
	latency     *prometheus.HistogramVec // per request: mode
	unavailable *prometheus.CounterVec   // fail mode
	refunds     *prometheus.CounterVec   // result
	rerouted    *prometheus.CounterVec   // outcome
	capResets   prometheus.Counter
	riskForgot  prometheus.Counter

	apply    prometheus.Histogram   // proposal to application, per batch
	batchOps prometheus.Histogram   // operations per log entry
	forwards *prometheus.CounterVec // result

	leaseGrants     *prometheus.CounterVec // result: acquired, renewed, empty, error
	leaseReturns    *prometheus.CounterVec // result
	leaseWait       prometheus.Histogram   // grant round trip
	leaseStrict     prometheus.Counter     // leased items no grant covered
	leaseCredits    *prometheus.CounterVec // result: granted, refused, error
	creditDecisions prometheus.Counter     // leased items decided from a credit
	leaseShed       *prometheus.CounterVec // queue

	walSyncs   prometheus.Histogram // records per fsync of the shared log
	walSyncDur prometheus.Histogram // write plus fsync time
	walBytes   prometheus.Counter

	queueFull *prometheus.CounterVec // queue, outcome

	policies
	nodeMetrics
}

// New makes the metrics and registers them, with the Go runtime's and the
// process's collectors, on a new registry.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.newDecisionMetrics()
	m.newLogMetrics()
	m.newLeaseMetrics()
	m.policies.register(m.reg)
	m.nodeMetrics.register(m.reg)
	m.reg.MustRegister(traceSpans, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is where the metrics are, for /metrics and for metrics of the
// caller's own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

func (m *Metrics) newDecisionMetrics() {
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
	m.unavailable = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_unavailable_total", Help: "Items decided by their fail mode because their shard could not decide in time.",
	}, []string{"fail"})
	m.refunds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_cross_shard_refunds_total", Help: "Compensating refunds sent when a multi-shard request was denied, by result.",
	}, []string{"result"})
	m.rerouted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_checks_rerouted_total",
		Help: "Check items a shard refused because a split moved their range, by outcome: sent to the new shard, or expired (the node's record did not route them elsewhere within the check's deadline; their fail mode answered).",
	}, []string{"outcome"})
	m.capResets = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quorate_emergency_cap_resets_total",
		Help: "Times the node's table of emergency-cap limiters was full (10,000 buckets) and started afresh.",
	})
	m.riskForgot = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quorate_risk_memory_forgotten_total",
		Help: "Remembered risk scores (policies with risk.memory) dropped because the node's risk memory was full.",
	})
	m.forwards = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_forwards_total", Help: "Shard batches forwarded to another node's leader, by result.",
	}, []string{"result"})
	m.queueFull = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_queue_full_total",
		Help: "Requests that found a bounded queue full, by queue (batcher, forwarder) and outcome (waited for a place, or shed when their deadline ended first).",
	}, []string{"queue", "outcome"})
	m.reg.MustRegister(m.checks, m.requests, m.latency, m.unavailable, m.refunds, m.rerouted, m.capResets, m.riskForgot, m.forwards, m.queueFull)
}

// Request, Item, FailMode, Refunds, Rerouted, LeaseFallback, PolicyOutcome
// and CapsReset implement decide.Observer.

func (m *Metrics) Request(mode, decision string, took time.Duration) {
	m.requests.WithLabelValues(mode, decision).Inc()
	m.latency.WithLabelValues(mode).Observe(took.Seconds())
}

func (m *Metrics) Item(mode, decision, reason string) {
	m.checks.WithLabelValues(mode, decision, reason).Inc()
}

func (m *Metrics) FailMode(outcome string) { m.unavailable.WithLabelValues(outcome).Inc() }

func (m *Metrics) Refunds(result string, n int) { m.refunds.WithLabelValues(result).Add(float64(n)) }

func (m *Metrics) Rerouted(outcome string, n int) {
	m.rerouted.WithLabelValues(outcome).Add(float64(n))
}

func (m *Metrics) LeaseFallback() { m.leaseStrict.Inc() }

func (m *Metrics) CapsReset() { m.capResets.Inc() }

// RiskForgotten implements decide.Observer.
func (m *Metrics) RiskForgotten() { m.riskForgot.Inc() }

// Forwarded counts n shard batches sent to a peer by result ("ok",
// "error").
func (m *Metrics) Forwarded(result string, n int) { m.forwards.WithLabelValues(result).Add(float64(n)) }

// Full counts a request that found a bounded queue full: it waited for a
// place, or was shed when its deadline ended first.
func (m *Metrics) Full(queue string, shed bool) {
	outcome := "waited"
	if shed {
		outcome = "shed"
	}
	m.queueFull.WithLabelValues(queue, outcome).Inc()
}

// QueueFull implements shard.QueueObserver.
func (m *Metrics) QueueFull(shed bool) { m.Full("batcher", shed) }
