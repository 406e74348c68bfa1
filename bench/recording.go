package bench

import (
	"cmp"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorate/quorate/bench/accuracy"
	"github.com/quorate/quorate/bench/latency"
)

// DefaultMaxArrivals bounds the checks a run keeps for the admission
// accountant: 24 bytes each, so about 770 MB at the bound. A run that
// decides more checks reports no accuracy rather than a partial one.
const DefaultMaxArrivals = 32 << 20

// Tick is what completed in one second of a run.
type Tick struct {
	Requests int64 `json:"requests"`
	Checks   int64 `json:"checks"`
	Errors   int64 `json:"errors"`
	// Seconds is the length of the tick: 1, except for the last of a round,
	// which ends with the round and is usually shorter. Rates are counts
	// divided by it.
	Seconds float64 `json:"seconds"`
}

// Recording is the raw outcome of one run against one target.
type Recording struct {
	// Namespace is the name every bucket of the run had.
	Namespace string
	Load      Load
	// Start is when the run started sending; Elapsed runs from then until
	// the last answer arrived.
	Start   time.Time
	Elapsed time.Duration
	// Interrupted: the run's context was cancelled before it was done.
	Interrupted bool

	Requests        int64 // answered, with or without error
	Checks          int64 // items of answered requests
	AllowedRequests int64 // requests allowed as a whole
	Errors          map[string]int64
	// FirstErrors holds the first message seen for each error code.
	FirstErrors map[string]string
	Reasons     [numReasons]int64

	// Latency of the successful requests: from the scheduled send time in
	// an open loop, from the actual send in a closed one.
	Latency *latency.Histogram
	// Service is the latency from the actual send (the same as Latency in
	// a closed loop).
	Service *latency.Histogram
	// Series counts completions per second since Start.
	Series []Tick

	// Arrivals are the decided checks, for the accountant, unless there
	// were more than the bound (ArrivalsDropped).
	Arrivals        []accuracy.Arrival
	ArrivalsDropped bool

	// Open loop only: requests sent more than LateThreshold after their
	// scheduled time, and the largest delay.
	Late   int64
	MaxLag time.Duration
}

// LateThreshold is how far behind schedule an open-loop request must be
// sent to count as late: the tool or its in-flight bound could not keep up.
const LateThreshold = time.Millisecond

// ErrorCount is the number of failed requests.
func (r *Recording) ErrorCount() int64 {
	var n int64
	for _, c := range r.Errors {
		n += c
	}
	return n
}

// recorder collects one worker's results; the run merges them at the end,
// so the hot path takes no lock but its latency histogram shard's.
type recorder struct {
	rec *Recording
	// budget is shared by the run's recorders: arrivals that may still be
	// kept before the bound.
	budget *atomic.Int64
	live   *Live
	hist   *histShard
	order  []int // scratch for grouping a request's items by bucket
}

func newRecorder(ns string, budget *atomic.Int64, live *Live, hist *histShard) *recorder {
	return &recorder{
		rec: &Recording{
			Namespace: ns,
			Errors:    map[string]int64{}, FirstErrors: map[string]string{},
		},
		budget: budget,
		live:   live,
		hist:   hist,
	}
}

// histograms are a run's latency histograms, sharded: one HDR histogram
// takes about 200 KB, too much to give each of an open loop's hundreds of
// workers its own (allocating them would delay the first sends), and one
// shared histogram would make every worker wait on one lock.
type histograms struct {
	shards []histShard
}

type histShard struct {
	mu       sync.Mutex
	lat, svc *latency.Histogram // guarded by mu; svc only in an open loop
}

// newHistograms returns enough shards for workers workers to rarely
// contend: a couple per CPU that can run them.
func newHistograms(workers int, open bool) *histograms {
	n := max(1, min(workers, 2*runtime.GOMAXPROCS(0)))
	h := &histograms{shards: make([]histShard, n)}
	for i := range h.shards {
		h.shards[i].lat = latency.New()
		if open {
			h.shards[i].svc = latency.New()
		}
	}
	return h
}

// shard is worker w's shard.
func (h *histograms) shard(w int) *histShard { return &h.shards[w%len(h.shards)] }

func (s *histShard) record(lat, svc time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lat.Record(lat)
	if s.svc != nil {
		s.svc.Record(svc)
	}
}

// merged returns the latency and service-time histograms of the run; in a
// closed loop, where the two are the same, service is latency.
func (h *histograms) merged() (lat, svc *latency.Histogram) {
	lat = latency.New()
	svc = lat
	if h.shards[0].svc != nil {
		svc = latency.New()
	}
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		lat.Merge(s.lat)
		if s.svc != nil {
			svc.Merge(s.svc)
		}
		s.mu.Unlock()
	}
	return lat, svc
}

// record adds one answered request: scheduled and sent are equal in a
// closed loop.
func (r *recorder) record(sched, sent, done time.Time, items []Item, buckets []uint64, out []Outcome, err error) {
	rec := r.rec
	rec.Requests++
	rec.Checks += int64(len(items))
	r.live.add(int64(len(items)), err != nil)
	sec := int(done.Sub(rec.Start) / time.Second)
	for len(rec.Series) <= sec {
		rec.Series = append(rec.Series, Tick{})
	}
	tick := &rec.Series[max(sec, 0)]
	tick.Requests++
	tick.Checks += int64(len(items))
	if err != nil {
		tick.Errors++
		code := ErrorCode(err)
		rec.Errors[code]++
		if _, ok := rec.FirstErrors[code]; !ok {
			rec.FirstErrors[code] = ErrorMessage(err)
		}
		return
	}
	r.hist.record(done.Sub(sched), done.Sub(sent))
	allowed := true
	for i := range out {
		reason := out[i].Reason
		if reason >= numReasons {
			reason = ReasonUnknown
		}
		rec.Reasons[reason]++
		allowed = allowed && out[i].Allowed
	}
	if allowed {
		rec.AllowedRequests++
	}
	if rec.ArrivalsDropped || r.budget.Add(-int64(len(items))) < 0 {
		rec.ArrivalsDropped, rec.Arrivals = true, nil
		return
	}
	// Without the limiter's own time, the midpoint of the round trip is the
	// best estimate of when it decided.
	mid := sent.UnixNano() + int64(done.Sub(sent)/2)
	arrival := func(i int) accuracy.Arrival {
		o := out[i]
		at := o.DecidedAt
		if at == 0 {
			at = mid
		}
		return accuracy.Arrival{
			Bucket: buckets[i], At: at, Cost: items[i].Cost, Checks: 1,
			Admitted: o.Allowed, Refunded: o.Reason == ReasonRefunded,
			Sent: sent.UnixNano(), Prepaid: o.Prepaid,
		}
	}
	if len(items) == 1 {
		rec.Arrivals = append(rec.Arrivals, arrival(0))
		return
	}
	// Items of one request on the same bucket are taken together or not at
	// all: one arrival of their summed cost. Judged one by one, a check
	// denied only because its sibling's tentative charge (refunded since)
	// used the room would count as under-admission.
	r.order = r.order[:0]
	for i := range items {
		r.order = append(r.order, i)
	}
	slices.SortFunc(r.order, func(a, b int) int { return cmp.Compare(buckets[a], buckets[b]) })
	for k := 0; k < len(r.order); {
		a := arrival(r.order[k])
		j := k + 1
		for ; j < len(r.order) && buckets[r.order[j]] == a.Bucket; j++ {
			b := arrival(r.order[j])
			a.Cost += b.Cost
			a.Checks++
			a.Admitted = a.Admitted && b.Admitted
			a.Refunded = a.Refunded && b.Refunded
			a.Prepaid = a.Prepaid && b.Prepaid
			a.At = max(a.At, b.At)
		}
		rec.Arrivals = append(rec.Arrivals, a)
		k = j
	}
}

// merge adds o (another worker of the same run) into r.
func (r *Recording) merge(o *Recording) {
	r.Requests += o.Requests
	r.Checks += o.Checks
	r.AllowedRequests += o.AllowedRequests
	for c, n := range o.Errors {
		r.Errors[c] += n
		if _, ok := r.FirstErrors[c]; !ok {
			r.FirstErrors[c] = o.FirstErrors[c]
		}
	}
	for i, n := range o.Reasons {
		r.Reasons[i] += n
	}
	for len(r.Series) < len(o.Series) {
		r.Series = append(r.Series, Tick{})
	}
	for i, t := range o.Series {
		r.Series[i].Requests += t.Requests
		r.Series[i].Checks += t.Checks
		r.Series[i].Errors += t.Errors
	}
	r.ArrivalsDropped = r.ArrivalsDropped || o.ArrivalsDropped
	if r.ArrivalsDropped {
		r.Arrivals = nil
	} else {
		r.Arrivals = append(r.Arrivals, o.Arrivals...)
	}
	r.Late += o.Late
	r.MaxLag = max(r.MaxLag, o.MaxLag)
}
