package srvlat

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// node is a metrics endpoint with the histogram quorate nodes export.
func node(t *testing.T) (*prometheus.HistogramVec, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: Metric, Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
	}, []string{"mode"})
	reg.MustRegister(h)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return h, strings.TrimPrefix(srv.URL, "http://")
}

func observe(h *prometheus.HistogramVec, mode string, seconds float64, n int) {
	for range n {
		h.WithLabelValues(mode).Observe(seconds)
	}
}

func TestScrapeDeltaAndQuantiles(t *testing.T) {
	ctx := context.Background()
	h1, a1 := node(t)
	h2, a2 := node(t)
	addrs := []string{a1, a2}
	observe(h1, "leased", 1, 500) // before the run: must not count
	observe(h1, "strict", 30e-6, 100)

	before, err := Scrape(ctx, http.DefaultClient, addrs, "leased")
	if err != nil {
		t.Fatal(err)
	}
	// The run: 990 fast checks over two nodes, 10 slow ones (1%).
	observe(h1, "leased", 30e-6, 600)
	observe(h2, "leased", 150e-6, 390)
	observe(h2, "leased", 0.3, 10)
	observe(h1, "strict", 0.3, 1000) // another mode: ignored
	after, err := Scrape(ctx, http.DefaultClient, addrs, "leased")
	if err != nil {
		t.Fatal(err)
	}
	run := after.Sub(before)
	if run.Total() != 1000 {
		t.Fatalf("run counted %d checks, want 1000", run.Total())
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{
		{0.5, 50e-6},   // 600 of 1000 within the first bucket
		{0.9, 200e-6},  // 990 within 200µs
		{0.99, 200e-6}, // the 990th check is the last fast one
		{0.995, 0.4096},
		{1, 0.4096},
	} {
		got, ok := run.Quantile(c.q)
		if !ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("p%v = %v (%v), want ≤ %v", c.q*100, got, ok, c.want)
		}
	}
}

func TestQuantileBeyondBuckets(t *testing.T) {
	h, addr := node(t)
	observe(h, "leased", 30, 3) // past the largest finite bucket
	got, err := Scrape(context.Background(), http.DefaultClient, []string{addr}, "leased")
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := got.Quantile(0.5); !ok || !math.IsInf(q, 1) {
		t.Errorf("p50 = %v, %v; want +Inf", q, ok)
	}
	if _, ok := (Hist{}).Quantile(0.5); ok {
		t.Error("an empty histogram has a quantile")
	}
}

func TestScrapeErrors(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("this is { not prometheus text\n"))
	}))
	defer bad.Close()
	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	for _, srv := range []*httptest.Server{bad, missing} {
		addr := strings.TrimPrefix(srv.URL, "http://")
		if _, err := Scrape(context.Background(), http.DefaultClient, []string{addr}, "leased"); err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: error %v; want one naming the address", addr, err)
		}
	}
}

// Nodes of different versions may bucket differently: a bound one side
// lacks counts what that side counted up to its next lower bound.
func TestDifferentLayouts(t *testing.T) {
	a := Hist{Bounds: []float64{0.001, math.Inf(1)}, Counts: []uint64{5, 10}}
	b := Hist{Bounds: []float64{0.002, math.Inf(1)}, Counts: []uint64{7, 7}}
	sum := a.Add(b)
	if sum.Total() != 17 {
		t.Fatalf("total %d, want 17", sum.Total())
	}
	if q, _ := sum.Quantile(0.5); q != 0.002 {
		t.Errorf("p50 of the sum ≤ %v, want ≤ 0.002 (12 of 17 checks within 2ms)", q)
	}
	// A counter reset (a node restarted between the scrapes) never wraps.
	restarted := Hist{Bounds: []float64{0.001, math.Inf(1)}, Counts: []uint64{1, 3}}
	if d := restarted.Sub(a); d.Total() != 0 || d.at(0.001) != 0 {
		t.Errorf("delta across a reset %+v; want nothing", d)
	}
}
