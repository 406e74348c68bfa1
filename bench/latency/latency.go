// Package latency records request latencies in HDR histograms and reduces
// them to the summaries quorate bench reports: p50, p90, p99, p99.9 and max,
// and the percentile curve it plots.
//
// An HDR histogram keeps every value to three significant digits in a fixed
// amount of memory whatever the number of samples, so a run's percentiles
// are exact to 0.1% instead of estimated from a sample, and histograms of
// several workers or rounds merge without losing anything.
package latency

import (
	"math"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Range and precision of every Histogram. Values are recorded in
// microseconds: below 1µs a gRPC or Redis round trip is not meaningful, and a
// highest value of one hour keeps a stalled server's queueing visible in an
// open-loop run instead of clamping it. Three significant digits cost about
// 200 KB per histogram.
const (
	lowest  = 1                  // µs
	highest = 3600 * 1000 * 1000 // µs: one hour
	sigfigs = 3
)

// Histogram is a latency histogram. It is not safe for concurrent use: give
// each worker its own and Merge them at the end, which is cheaper than a
// shared, locked one on the hot path.
type Histogram struct {
	h *hdrhistogram.Histogram
	// max is the largest value recorded, exactly (the histogram would round
	// it up to its bucket's highest equivalent value).
	max time.Duration
	// clamped counts values outside [lowest, highest] recorded as the bound.
	clamped int64
}

// New returns an empty Histogram.
func New() *Histogram {
	return &Histogram{h: hdrhistogram.New(lowest, highest, sigfigs)}
}

// Record adds one latency. Values below 1µs count as 1µs and values above
// one hour as one hour (Summary reports how many were clamped).
func (h *Histogram) Record(d time.Duration) {
	if d > h.max {
		h.max = d
	}
	us := d.Microseconds()
	switch {
	case us < lowest:
		// A sub-microsecond latency is real (a fake driver in a test, a
		// rejected request): count it as the lowest bucket, not an error.
		us = lowest
	case us > highest:
		us = highest
		h.clamped++
	}
	// RecordValue fails only outside the trackable range, excluded above.
	_ = h.h.RecordValue(us)
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	h.h.Merge(o.h)
	h.max = max(h.max, o.max)
	h.clamped += o.clamped
}

// Count is the number of values recorded.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Summary is a histogram reduced to the numbers a report prints.
type Summary struct {
	Count                    int64
	P50, P90, P99, P999, Max time.Duration
	Mean                     time.Duration
	// Clamped is how many values exceeded the histogram's range (one hour)
	// and were recorded as one hour.
	Clamped int64
}

// Summary returns the percentiles of h. Each percentile is the highest value
// that percent of the samples do not exceed, to within 0.1%; Max is exact.
// An empty histogram gives a zero Summary.
func (h *Histogram) Summary() Summary {
	if h.Count() == 0 {
		return Summary{}
	}
	return Summary{
		Count:   h.Count(),
		P50:     h.at(50),
		P90:     h.at(90),
		P99:     h.at(99),
		P999:    h.at(99.9),
		Max:     h.max,
		Mean:    time.Duration(h.h.Mean() * float64(time.Microsecond)),
		Clamped: h.clamped,
	}
}

// at is the value at percentile p, never above the exact maximum (HDR
// reports a bucket's highest equivalent value, which can exceed it).
func (h *Histogram) at(p float64) time.Duration {
	v := time.Duration(h.h.ValueAtPercentile(p)) * time.Microsecond
	return min(v, h.max)
}

// Point is one point of a percentile curve: Percentile of the samples took
// at most Latency.
type Point struct {
	Percentile float64
	Latency    time.Duration
}

// Curve returns the percentile curve of h for plotting, with pointsPerDecade
// points for each "nine" (90%, 99%, 99.9%, ...) so the tail gets as much
// room as the body, up to the percentile that the number of samples can
// still resolve, and ending at 100% (the maximum).
func (h *Histogram) Curve(pointsPerDecade int) []Point {
	n := h.Count()
	if n == 0 {
		return nil
	}
	if pointsPerDecade < 1 {
		pointsPerDecade = 1
	}
	// Beyond 1/n of the samples in the tail, every percentile is the maximum.
	maxNines := math.Log10(float64(n))
	var pts []Point
	for i := 0; ; i++ {
		nines := float64(i) / float64(pointsPerDecade)
		if nines > maxNines {
			break
		}
		p := 100 * (1 - math.Pow(10, -nines))
		pts = append(pts, Point{Percentile: p, Latency: h.at(p)})
	}
	return append(pts, Point{Percentile: 100, Latency: h.max})
}
