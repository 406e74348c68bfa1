package bench

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quorate/quorate/bench/srvlat"
)

// A target with metrics addresses reports what its nodes' histograms
// counted during the measured runs only: not the warmups, not other modes.
func TestExecuteReportsServerSideLatency(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: srvlat.Metric, Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
	}, []string{"mode"})
	reg.MustRegister(h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	calls := 0
	d := &fakeDriver{clk: SystemClock{}, perCall: func(int) {
		calls++
		// Every tenth check is slow: p90 and above land in its bucket.
		if calls%10 == 0 {
			h.WithLabelValues("leased").Observe(0.3)
		} else {
			h.WithLabelValues("leased").Observe(30e-6)
		}
		h.WithLabelValues("strict").Observe(1)
	}}
	target := &Target{Name: "quorate", Mode: "leased", Driver: d, Metrics: []string{strings.TrimPrefix(srv.URL, "http://")}}
	plan := Plan{Scenario: "s", Workload: testWorkload(), Load: Load{Concurrency: 1, Requests: 200}, Rounds: 2, Warmup: 30 * time.Millisecond}
	runs, err := Execute(context.Background(), plan, []*Target{target}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	sv := runs[0].ServerMS
	if sv == nil {
		t.Fatalf("no server-side latency (note %q)", runs[0].ServerNote)
	}
	if calls <= 200 {
		t.Fatalf("the warmups made no calls (%d in all); the test cannot tell them apart", calls)
	}
	if sv.Requests != 200 || sv.P50LE != 0.05 || sv.P99LE != 409.6 {
		t.Errorf("server side %+v; want 200 requests (the measured ones), p50 ≤ 0.05ms, p99 ≤ 409.6ms", *sv)
	}

	// Metrics that cannot be read: a note, and the run still counts.
	srv.Close()
	runs, err = Execute(context.Background(), plan, []*Target{target}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].ServerMS != nil || !strings.Contains(runs[0].ServerNote, "srvlat") || runs[0].Requests != 200 {
		t.Errorf("unreadable metrics: server %+v, note %q, %d requests", runs[0].ServerMS, runs[0].ServerNote, runs[0].Requests)
	}

	// No metrics addresses, and the caller said why: the note says it.
	target.Metrics, target.MetricsNote = nil, "localhost:7401 is not a node's RPC address"
	runs, err = Execute(context.Background(), plan, []*Target{target}, Hooks{})
	if err != nil {
		t.Fatal(err)
	}
	if runs[0].ServerMS != nil || runs[0].ServerNote != target.MetricsNote {
		t.Errorf("no metrics addresses: server %+v, note %q", runs[0].ServerMS, runs[0].ServerNote)
	}
}
