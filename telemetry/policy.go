package telemetry

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// policies count decisions per policy id, so that an operator sees what a
// new (shadow) limit would do before enforcing it. The label set is
// bounded: past maxPolicyLabels distinct ids, decisions count under
// policy="_other" (and the overflow is counted), since a set may hold far
// more policies than a Prometheus server wants series.
type policies struct {
	policyDecisions *prometheus.CounterVec // policy, outcome
	policyOverflow  prometheus.Counter
	policyVersion   prometheus.Gauge
	policyCount     prometheus.Gauge
	policyLag       prometheus.Histogram

	seen   sync.Map // policy id -> *outcomeCounts: ids with series of their own (and "_other")
	labels struct {
		sync.Mutex
		n int // entries in seen
	}
}

const (
	maxPolicyLabels  = 1000
	otherPolicyLabel = "_other"
)

func (m *policies) register(reg prometheus.Registerer) {
	m.policyDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_policy_decisions_total",
		Help: "Descriptor checks per policy id and outcome: allowed, denied, soft_over (a SOFT policy over its limit), shadow_would_deny (a SHADOW policy that would have denied), fail_open, unavailable (the shard could not decide and the policy fails closed, or its emergency cap is spent), blocked (emergency blocks, by block id), throttled (admitted after a delay: a THROTTLE policy over its rate, a SOFT policy's friction).",
	}, []string{"policy", "outcome"})
	m.policyOverflow = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "quorate_policy_label_overflow_total",
		Help: "Policy decisions counted under policy=\"_other\" because more than 1000 policy ids already have series.",
	})
	m.policyVersion = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_policy_version", Help: "Version of the policy set this node decides with.",
	})
	m.policyCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_policies", Help: "Policies in the set this node decides with.",
	})
	m.policyLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "quorate_policy_propagation_seconds",
		Help:    "Time from the meta leader proposing a policy change to this node deciding with it (clocks of two nodes: exact on one machine, NTP-bounded across machines).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1ms .. 8s
	})
	reg.MustRegister(m.policyDecisions, m.policyOverflow, m.policyVersion, m.policyCount, m.policyLag)
}

// PolicyOutcome counts one decision of policy id (decide.Observer).
func (m *policies) PolicyOutcome(id, outcome string) {
	v, ok := m.seen.Load(id)
	if !ok {
		id, v = m.admit(id)
	}
	if i := outcomeIndex(outcome); i >= 0 {
		v.(*outcomeCounts)[i].Add(1)
	}
	m.policyDecisions.WithLabelValues(id, outcome).Inc()
}

// admit gives id series and counts of its own, or "_other"'s past the
// bound.
func (m *policies) admit(id string) (string, any) {
	m.labels.Lock()
	defer m.labels.Unlock()
	if v, ok := m.seen.Load(id); ok {
		return id, v
	}
	if m.labels.n >= maxPolicyLabels {
		m.policyOverflow.Inc()
		v, _ := m.seen.LoadOrStore(otherPolicyLabel, new(outcomeCounts))
		return otherPolicyLabel, v
	}
	v := new(outcomeCounts)
	m.seen.Store(id, v)
	m.labels.n++
	return id, v
}

// PolicyTotals returns each policy's decisions since the process started,
// by id (past 1000 ids, the rest under "_other"), sorted by id.
func (m *policies) PolicyTotals() []PolicyTotal {
	var out []PolicyTotal
	m.seen.Range(func(k, v any) bool {
		out = append(out, v.(*outcomeCounts).total(k.(string)))
		return true
	})
	slices.SortFunc(out, func(a, b PolicyTotal) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// PolicySet reports the policy set this process decides with and, when
// the change was stamped by the meta leader (lag > 0 known), how long it
// took to arrive.
func (m *policies) PolicySet(version uint64, count int, lag time.Duration, stamped bool) {
	m.policyVersion.Set(float64(version))
	m.policyCount.Set(float64(count))
	if stamped {
		m.policyLag.Observe(max(0, lag.Seconds()))
	}
}
