package topk

import "github.com/prometheus/client_golang/prometheus"

// metrics are a tracker's counts of what it could not keep. They exist
// from New, so a tracker counts before (or without) Register.
type metrics struct {
	dropped         *prometheus.CounterVec // reason
	droppedPolicies prometheus.Counter     // reason="policies"
	droppedInvalid  prometheus.Counter     // reason="invalid"
	tracked         prometheus.GaugeFunc
}

func newMetrics(t *Tracker) metrics {
	m := metrics{
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quorate_topk_dropped_total",
			Help: "Observations the top-keys tracker dropped, by reason: policies (MaxPolicies policies were already tracked), invalid (negative cost, empty or overlong policy id, overlong key).",
		}, []string{"reason"}),
		tracked: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "quorate_topk_policies",
			Help: "Policies whose top keys this node tracks.",
		}, func() float64 { return float64(t.count.Load()) }),
	}
	// Children made once: the hot path does no label lookup.
	m.droppedPolicies = m.dropped.WithLabelValues("policies")
	m.droppedInvalid = m.dropped.WithLabelValues("invalid")
	return m
}

// Register adds the tracker's metrics to reg.
func (t *Tracker) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{t.dropped, t.tracked} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
