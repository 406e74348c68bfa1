package latency

import (
	"math"
	"testing"
	"time"
)

// within checks got is within 0.1% (HDR's three significant digits) of want.
func within(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if math.Abs(float64(got-want)) > 0.001*float64(want) {
		t.Errorf("%s = %v; want %v ±0.1%%", what, got, want)
	}
}

func TestSummaryOfUniformValues(t *testing.T) {
	// 1µs, 2µs, ..., 10000µs once each: the p-th percentile is p% of 10ms.
	h := New()
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	s := h.Summary()
	if s.Count != 10000 {
		t.Fatalf("count %d", s.Count)
	}
	within(t, "p50", s.P50, 5*time.Millisecond)
	within(t, "p90", s.P90, 9*time.Millisecond)
	within(t, "p99", s.P99, 9900*time.Microsecond)
	within(t, "p99.9", s.P999, 9990*time.Microsecond)
	within(t, "mean", s.Mean, 5000500*time.Nanosecond)
	if s.Max != 10*time.Millisecond {
		t.Errorf("max %v; want exactly 10ms", s.Max)
	}
}

func TestMaxIsExactAndBoundsPercentiles(t *testing.T) {
	// 1234567ns falls in an HDR bucket whose highest equivalent value is
	// above it; the summary must not report more than was recorded.
	h := New()
	h.Record(1234567 * time.Nanosecond)
	s := h.Summary()
	if s.Max != 1234567*time.Nanosecond {
		t.Errorf("max %v; want 1.234567ms exactly", s.Max)
	}
	for _, p := range []time.Duration{s.P50, s.P90, s.P99, s.P999} {
		if p > s.Max || p < 1233*time.Microsecond {
			t.Errorf("percentile %v outside [1.233ms, max]", p)
		}
	}
}

func TestMergeEqualsRecordingTogether(t *testing.T) {
	a, b, all := New(), New(), New()
	for i := 1; i <= 2000; i++ {
		d := time.Duration(i*i) * time.Microsecond
		all.Record(d)
		if i%2 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(b)
	if got, want := a.Summary(), all.Summary(); got != want {
		t.Errorf("merged %+v\nwant   %+v", got, want)
	}
}

func TestEmpty(t *testing.T) {
	h := New()
	if s := h.Summary(); s != (Summary{}) {
		t.Errorf("empty summary %+v", s)
	}
	if c := h.Curve(5); c != nil {
		t.Errorf("empty curve %v", c)
	}
}

func TestClamping(t *testing.T) {
	h := New()
	h.Record(100 * time.Nanosecond) // below 1µs: counts as 1µs
	h.Record(2 * time.Hour)         // above the range: counts as 1h, and is reported
	s := h.Summary()
	if s.Count != 2 || s.Clamped != 1 {
		t.Errorf("count %d clamped %d; want 2 and 1", s.Count, s.Clamped)
	}
	if s.Max != 2*time.Hour {
		t.Errorf("max %v; want the exact 2h", s.Max)
	}
	if s.P50 != time.Microsecond {
		t.Errorf("p50 %v; want 1µs", s.P50)
	}
}

func TestCurve(t *testing.T) {
	h := New()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	c := h.Curve(2)
	// 1000 samples resolve three nines: points at 0, 0.5, 1, ..., 3 nines
	// (7 points), then the maximum at 100%.
	if len(c) != 8 {
		t.Fatalf("%d points: %v", len(c), c)
	}
	if c[0].Percentile != 0 || c[2].Percentile != 90 || c[len(c)-1].Percentile != 100 {
		t.Errorf("percentiles %v", c)
	}
	within(t, "curve at 90%", c[2].Latency, 900*time.Millisecond)
	if c[len(c)-1].Latency != time.Second {
		t.Errorf("last point %v; want the max, 1s", c[len(c)-1].Latency)
	}
	for i := 1; i < len(c); i++ {
		if c[i].Latency < c[i-1].Latency || c[i].Percentile <= c[i-1].Percentile {
			t.Errorf("curve not increasing at %d: %v", i, c)
		}
	}
}
