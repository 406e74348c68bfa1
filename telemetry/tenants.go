package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tenantMetrics describe the tenant assignment a node resolves tiers with.
type tenantMetrics struct {
	tenantVersion prometheus.Gauge
	tenantCount   prometheus.Gauge
	tenantLag     prometheus.Histogram
}

func (m *tenantMetrics) register(reg prometheus.Registerer) {
	m.tenantVersion = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_tenant_assignment_version", Help: "Version of the tenant assignment this node resolves tiers with.",
	})
	m.tenantCount = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "quorate_tenant_assignments", Help: "Tenants assigned to a plan in the assignment this node resolves tiers with.",
	})
	m.tenantLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "quorate_tenant_propagation_seconds",
		Help:    "Time from the meta leader proposing a tenant assignment change to this node resolving tiers with it (clocks of two nodes: exact on one machine, NTP-bounded across machines).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1ms .. 8s
	})
	reg.MustRegister(m.tenantVersion, m.tenantCount, m.tenantLag)
}

// TenantSet reports the tenant assignment this process resolves tiers
// with and, when the change was stamped by the meta leader, how long it
// took to arrive.
func (m *tenantMetrics) TenantSet(version uint64, count int, lag time.Duration, stamped bool) {
	m.tenantVersion.Set(float64(version))
	m.tenantCount.Set(float64(count))
	if stamped {
		m.tenantLag.Observe(max(0, lag.Seconds()))
	}
}
