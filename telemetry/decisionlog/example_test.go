package decisionlog_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/telemetry/decisionlog"
)

// A node logs to stdout (as `--decision-log stdout` would give it) and
// builds a record only for what Wants.
func Example() {
	sink, err := decisionlog.ParseSink("stdout")
	if err != nil {
		panic(err)
	}
	l, err := decisionlog.New(decisionlog.Config{
		Sinks: []decisionlog.Sink{sink}, Node: "n1", Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		panic(err)
	}
	if l.Wants(decisionlog.Deny) {
		l.Log(&decisionlog.Record{
			Time:      time.Date(2026, 3, 1, 3, 12, 0, 0, time.UTC),
			RequestID: "r1", Source: "http", Mode: "strict",
			Decision: "DENY", Reason: "WINDOW_FULL", Policy: "plan_free", PolicyVersion: 3, LatencyUS: 850,
			Descriptors: decisionlog.Descriptors{TenantID: "t_1", Route: "/v1/search"},
		})
	}
	if err := l.Close(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"time":"2026-03-01T03:12:00Z","request_id":"r1","node":"n1","source":"http","mode":"strict","decision":"DENY","reason":"WINDOW_FULL","policy":"plan_free","policy_version":3,"latency_us":850,"descriptors":{"tenant_id":"t_1","route":"/v1/search"},"sample_rate":1}
}
