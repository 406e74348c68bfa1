// Package srvlat reads how long quorate nodes took to decide checks, from
// their Prometheus histogram quorate_check_duration_seconds, so that a
// benchmark can tell the time spent inside the servers from the time spent
// on the network, in the kernel's run queues and in the load tool. On a
// machine that the servers share with the tool, the two differ by far.
//
// A histogram only knows buckets, so a quantile here is the upper bound of
// the bucket that holds it: "p99 ≤ 0.4ms".
package srvlat

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric is the histogram read: the time a node took to answer a Check.
const Metric = "quorate_check_duration_seconds"

// Hist is a cumulative histogram summed over nodes: Counts[i] checks took
// at most Bounds[i] seconds (the last bound is +Inf).
type Hist struct {
	Bounds []float64
	Counts []uint64
}

// Total is the number of checks the histogram counts.
func (h Hist) Total() uint64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// at is the cumulative count at bound b: the count of the largest bound
// not above b (0 below the first). Histograms of the same metric normally
// share their bounds; with different layouts (nodes of different versions)
// this is what is known of h at b.
func (h Hist) at(b float64) uint64 {
	i := sort.SearchFloat64s(h.Bounds, b) // first bound ≥ b
	if i < len(h.Bounds) && h.Bounds[i] == b {
		return h.Counts[i]
	}
	if i == 0 {
		return 0
	}
	return h.Counts[i-1]
}

// bounds is the union of h's and o's bounds.
func (h Hist) bounds(o Hist) []float64 {
	set := map[float64]bool{}
	for _, b := range h.Bounds {
		set[b] = true
	}
	for _, b := range o.Bounds {
		set[b] = true
	}
	out := make([]float64, 0, len(set))
	for b := range set {
		out = append(out, b)
	}
	sort.Float64s(out)
	return out
}

// Sub returns what h counted beyond before (an earlier scrape of the same
// nodes): the checks of one run.
func (h Hist) Sub(before Hist) Hist {
	d := Hist{Bounds: h.bounds(before)}
	for _, b := range d.Bounds {
		now, then := h.at(b), before.at(b)
		d.Counts = append(d.Counts, now-min(now, then))
	}
	return d
}

// Add returns the sum of h and o, bound by bound.
func (h Hist) Add(o Hist) Hist {
	sum := Hist{Bounds: h.bounds(o)}
	for _, b := range sum.Bounds {
		sum.Counts = append(sum.Counts, h.at(b)+o.at(b))
	}
	return sum
}

// Quantile returns the upper bound, in seconds, of the bucket holding the
// q-quantile (0 < q ≤ 1), and false when the histogram is empty. The bound
// is +Inf when the quantile lies beyond the largest finite bucket.
func (h Hist) Quantile(q float64) (float64, bool) {
	total := h.Total()
	if total == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(total)))
	for i, c := range h.Counts {
		if c >= rank {
			return h.Bounds[i], true
		}
	}
	return math.Inf(1), true
}

func fromMap(m map[float64]uint64) Hist {
	var h Hist
	for b := range m {
		h.Bounds = append(h.Bounds, b)
	}
	sort.Float64s(h.Bounds)
	for _, b := range h.Bounds {
		h.Counts = append(h.Counts, m[b])
	}
	return h
}

// Scrape reads each node's /metrics at addrs (host:port of the HTTP
// servers) and returns the histogram of the given check mode ("strict" or
// "leased") summed over them. A node that has not answered a check of that
// mode yet contributes nothing.
func Scrape(ctx context.Context, hc *http.Client, addrs []string, mode string) (Hist, error) {
	var sum Hist
	for _, addr := range addrs {
		h, err := scrapeOne(ctx, hc, addr, mode)
		if err != nil {
			return Hist{}, err
		}
		sum = sum.Add(h)
	}
	return sum, nil
}

func scrapeOne(ctx context.Context, hc *http.Client, addr, mode string) (Hist, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return Hist{}, fmt.Errorf("srvlat: %s: %w", addr, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Hist{}, fmt.Errorf("srvlat: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Hist{}, fmt.Errorf("srvlat: GET http://%s/metrics: %s", addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return Hist{}, fmt.Errorf("srvlat: http://%s/metrics: %w", addr, err)
	}
	return fromFamily(fams[Metric], mode), nil
}

// fromFamily picks the series of mode out of the histogram family.
func fromFamily(f *dto.MetricFamily, mode string) Hist {
	m := map[float64]uint64{}
	for _, s := range f.GetMetric() {
		if label(s, "mode") != mode || s.GetHistogram() == nil {
			continue
		}
		h := s.GetHistogram()
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) { // the text format lists +Inf, the count says it too
				m[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
		m[math.Inf(1)] += h.GetSampleCount()
	}
	return fromMap(m)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
