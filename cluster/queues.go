package cluster

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/shard"
)

// queueMetrics count what the node's bounded queues turn away: a request
// that finds the shard batcher's or a forwarder's queue full waits for a
// place until its deadline ("waited"), or gives up ("shed") and is
// answered by its fail mode.
type queueMetrics struct {
	queueFull *prometheus.CounterVec // queue, outcome
}

func (q *queueMetrics) register(reg prometheus.Registerer) {
	q.queueFull = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_queue_full_total",
		Help: "Requests that found a bounded queue full, by queue (batcher, forwarder) and outcome (waited for a place, or shed when their deadline ended first).",
	}, []string{"queue", "outcome"})
	reg.MustRegister(q.queueFull)
}

func (q *queueMetrics) full(queue string, shed bool) {
	outcome := "waited"
	if shed {
		outcome = "shed"
	}
	q.queueFull.WithLabelValues(queue, outcome).Inc()
}

// QueueFull implements shard.QueueObserver.
func (q *queueMetrics) QueueFull(shed bool) { q.full("batcher", shed) }

var _ shard.QueueObserver = (*metrics)(nil)
