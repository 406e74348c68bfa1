package decisionlog

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The where label of records dropped before any sink, and of those a
// subscriber was too slow for.
const (
	whereQueue      = "queue"
	whereSubscriber = "subscriber"
)

// metrics are the logger's counters. Their names are fixed: alert rules
// elsewhere depend on them.
type metrics struct {
	records *prometheus.CounterVec // kind: records accepted into the queue
	dropped *prometheus.CounterVec // where: queue, a sink's name, subscriber
	errors  *prometheus.CounterVec // sink: failed writes (each a dropped batch)
	bytes   *prometheus.CounterVec // sink: bytes written
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quorate_decision_log_records_total",
			Help: "Decision records accepted into the decision log's queue, by kind (deny, shadow_would_deny, fail_open, allow: sampled allows only).",
		}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quorate_decision_log_dropped_total",
			Help: "Decision records dropped, by where: queue (the logger's queue was full, or the record too long), a sink's name (its queue was full or its write failed), subscriber (a live tail was too slow).",
		}, []string{"where"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quorate_decision_log_sink_errors_total",
			Help: "Failed writes (each one dropped batch) of a decision log sink, by sink.",
		}, []string{"sink"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quorate_decision_log_bytes_total",
			Help: "Bytes a decision log sink wrote, by sink.",
		}, []string{"sink"}),
	}
	var err error
	for _, v := range []**prometheus.CounterVec{&m.records, &m.dropped, &m.errors, &m.bytes} {
		if *v, err = register(reg, *v); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name, so that two loggers (a test's, a restarted one's) share one
// registry's series.
func register(reg prometheus.Registerer, c *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return existing, nil
		}
	}
	return nil, configErr("Registerer: %v", err)
}
