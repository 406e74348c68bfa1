package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/telemetry"
)

// metrics are the process's metrics (package telemetry: decisions, leases,
// the shared log, queues) with the node's own beside them on the same
// registry: leadership, replica moves and splits, the record.
type metrics struct {
	*telemetry.Metrics

	leaderChg *prometheus.CounterVec // group
	leader    *prometheus.GaugeVec   // group: 1 while this node leads it

	moveMetrics // replication.go
}

func newMetrics() *metrics {
	m := &metrics{Metrics: telemetry.New()}
	m.leaderChg = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_leader_changes_total", Help: "Leader changes observed by this node, by group.",
	}, []string{"group"})
	m.leader = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quorate_group_leader", Help: "1 while this node leads the group.",
	}, []string{"group"})
	m.Registry().MustRegister(m.leaderChg, m.leader)
	m.moveMetrics.register(m.Registry())
	return m
}
