package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// RunSpec is one run: a workload, a load, and the namespace that makes its
// buckets its own.
type RunSpec struct {
	Workload Workload
	Load     Load
	// Namespace names every bucket of the run (the items' Name). Give each
	// run a new one, so it starts from fresh buckets as the accountant
	// assumes.
	Namespace string
	// Seed makes the requests reproducible: an open loop sends the same
	// sequence for the same seed; a closed loop gives each client its own
	// sequence derived from it.
	Seed uint64
	// Clock defaults to SystemClock.
	Clock Clock
	// Live, if set, is updated as requests complete.
	Live *Live
	// MaxArrivals bounds the checks kept for the accountant
	// (0: DefaultMaxArrivals).
	MaxArrivals int64
}

// Run sends spec's load to d until a bound is reached or ctx is done, and
// returns what it recorded. Cancelling ctx stops the run early: requests in
// flight are abandoned and not counted, and the Recording says
// Interrupted. Run fails only on an invalid spec.
func Run(ctx context.Context, d Driver, spec RunSpec) (*Recording, error) {
	if err := spec.Workload.Validate(); err != nil {
		return nil, fmt.Errorf("bench: workload: %w", err)
	}
	if err := spec.Load.Validate(); err != nil {
		return nil, fmt.Errorf("bench: load: %w", err)
	}
	if spec.Clock == nil {
		spec.Clock = SystemClock{}
	}
	budget := &atomic.Int64{}
	if spec.MaxArrivals > 0 {
		budget.Store(spec.MaxArrivals)
	} else {
		budget.Store(DefaultMaxArrivals)
	}
	r := &runner{spec: spec, d: d, clk: spec.Clock, budget: budget,
		hist: newHistograms(spec.Load.Concurrency, spec.Load.Open())}
	var recs []*recorder
	if spec.Load.Open() {
		recs = r.openLoop(ctx)
	} else {
		recs = r.closedLoop(ctx)
	}
	// The run is over when the last answer is in, not after the merging.
	end := r.clk.Now()
	rec := recs[0].rec
	for _, o := range recs[1:] {
		rec.merge(o.rec)
	}
	rec.Load = spec.Load
	rec.Latency, rec.Service = r.hist.merged()
	rec.Elapsed = end.Sub(r.start)
	rec.Interrupted = ctx.Err() != nil
	return rec, nil
}

// runner is the state of one Run shared by its goroutines; every field is
// set before they start and only read after, except issued (atomic).
type runner struct {
	spec   RunSpec
	d      Driver
	clk    Clock
	budget *atomic.Int64
	hist   *histograms
	start  time.Time
	end    time.Time // zero: no time bound
	// issued counts requests started, against Load.Requests.
	issued atomic.Int64
}

// begin starts the run's clock, once every worker is set up: setting up is
// not the target's time, and an open loop's first sends must not be late
// because of it.
func (r *runner) begin(recs []*recorder) {
	r.start = r.clk.Now()
	if r.spec.Load.Duration > 0 {
		r.end = r.start.Add(r.spec.Load.Duration)
	}
	for _, rec := range recs {
		rec.rec.Start = r.start
	}
}

// expired reports whether the time bound has passed at now.
func (r *runner) expired(now time.Time) bool {
	return !r.end.IsZero() && !now.Before(r.end)
}

// claim reserves one request against the request bound.
func (r *runner) claim() bool {
	return r.spec.Load.Requests == 0 || r.issued.Add(1) <= r.spec.Load.Requests
}

// check sends one request with the request deadline. When the run itself
// is cancelled meanwhile (ctx is done afterwards), the request measures
// nothing and the caller drops it.
func (r *runner) check(ctx context.Context, items []Item, out []Outcome) error {
	cctx, cancel := context.WithTimeout(ctx, r.spec.Load.timeout())
	defer cancel()
	return r.d.Check(cctx, items, out)
}

// closedLoop runs Concurrency clients, each sending its next request as
// soon as the previous one is answered.
func (r *runner) closedLoop(ctx context.Context) []*recorder {
	n := r.spec.Load.Concurrency
	recs := make([]*recorder, n)
	gens := make([]*Generator, n)
	for w := range n {
		recs[w] = newRecorder(r.spec.Namespace, r.budget, r.spec.Live, r.hist.shard(w))
		gens[w] = r.spec.Workload.NewGenerator(r.spec.Namespace, r.spec.Seed+uint64(w)*0x9e3779b97f4a7c15)
	}
	r.begin(recs)
	var wg sync.WaitGroup
	for w := range n {
		gen := gens[w]
		wg.Go(func() {
			items := make([]Item, r.spec.Workload.Items)
			buckets := make([]uint64, len(items))
			out := make([]Outcome, len(items))
			for ctx.Err() == nil && !r.expired(r.clk.Now()) && r.claim() {
				gen.Next(items, buckets)
				sent := r.clk.Now()
				err := r.check(ctx, items, out)
				if ctx.Err() != nil {
					return
				}
				recs[w].record(sent, sent, r.clk.Now(), items, buckets, out, err)
			}
		})
	}
	wg.Wait()
	return recs
}

// slot is one request of an open loop on its way through a worker. The
// loop has Concurrency slots: taking a free one is how the scheduler waits
// for room in flight.
type slot struct {
	sched   time.Time
	items   []Item
	buckets []uint64
	out     []Outcome
}

// openLoop schedules request k at start + k/Rate, whatever happened to the
// earlier ones, and measures each request's latency from its scheduled time.
// When every slot is busy the scheduler waits for one and then sends the
// overdue requests at once: their latency includes the wait, which is the
// queueing a real client at that rate would have seen.
func (r *runner) openLoop(ctx context.Context) []*recorder {
	n := r.spec.Load.Concurrency
	free := make(chan *slot, n)
	for range n {
		items := r.spec.Workload.Items
		free <- &slot{items: make([]Item, items), buckets: make([]uint64, items), out: make([]Outcome, items)}
	}
	jobs := make(chan *slot)
	recs := make([]*recorder, n+1)
	for w := range n {
		recs[w] = newRecorder(r.spec.Namespace, r.budget, r.spec.Live, r.hist.shard(w))
	}
	// The scheduler's recorder holds only its lateness counts.
	sched := newRecorder(r.spec.Namespace, r.budget, nil, nil)
	recs[n] = sched
	gen := r.spec.Workload.NewGenerator(r.spec.Namespace, r.spec.Seed)
	interval := float64(time.Second) / r.spec.Load.Rate
	r.begin(recs)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for s := range jobs {
				sent := r.clk.Now()
				err := r.check(ctx, s.items, s.out)
				if ctx.Err() == nil {
					recs[w].record(s.sched, sent, r.clk.Now(), s.items, s.buckets, s.out, err)
				}
				free <- s
			}
		})
	}
schedule:
	for k := int64(0); r.spec.Load.Requests == 0 || k < r.spec.Load.Requests; k++ {
		at := r.start.Add(time.Duration(float64(k) * interval))
		if r.expired(at) {
			break
		}
		if r.clk.SleepUntil(ctx, at) != nil {
			break
		}
		var s *slot
		select {
		case s = <-free:
		case <-ctx.Done():
			break schedule
		}
		gen.Next(s.items, s.buckets)
		s.sched = at
		if lag := r.clk.Now().Sub(at); lag > LateThreshold {
			sched.rec.Late++
			sched.rec.MaxLag = max(sched.rec.MaxLag, lag)
		}
		jobs <- s
	}
	close(jobs)
	wg.Wait()
	return recs
}
