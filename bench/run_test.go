package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/internal/await"
)

// TestOpenLoopSendsOnScheduleAndMeasuresFromIt runs an open loop at 100
// requests/s with one request in flight at most, on a manual clock.
// Request 1 (scheduled at 10ms) stalls until 50ms. The loop must then send
// the overdue requests 2, 3 and 4 at once, and count their latency from
// their scheduled times (30, 20 and 10ms), not from when they were sent
// (0ms): that is what coordinated omission would hide. Requests 5 to 7 are
// sent exactly on schedule.
func TestOpenLoopSendsOnScheduleAndMeasuresFromIt(t *testing.T) {
	clk := newManualClock()
	t0 := clk.Now()
	d := &fakeDriver{clk: clk, called: make(chan int, 1)}
	release := d.stall(1)
	live := &Live{}
	spec := RunSpec{
		Workload: testWorkload(), Namespace: "t", Clock: clk, Live: live,
		Load: Load{Concurrency: 1, Rate: 100, Requests: 8},
	}
	done := make(chan *Recording)
	go func() {
		rec, err := Run(context.Background(), d, spec)
		if err != nil {
			t.Error(err)
		}
		done <- rec
	}()
	// step moves the clock to request k's scheduled time once the requests
	// before it are answered and the scheduler sleeps until then: the clock
	// never moves under a request in flight, so every time is exact.
	step := func(k int) {
		t.Helper()
		await.True(t, 5*time.Second, fmt.Sprintf("%d answers", k), func() bool {
			n, _, _ := live.Snapshot()
			return n == int64(k)
		})
		next := t0.Add(time.Duration(k) * 10 * time.Millisecond)
		await.True(t, 5*time.Second, fmt.Sprintf("the scheduler to sleep until %v", next.Sub(t0)), func() bool {
			at, ok := clk.nextWake()
			return ok && at.Equal(next)
		})
		clk.Set(next)
	}

	step(1) // request 0 went at once; request 1 is due at 10ms
	if i := <-d.called; i != 1 {
		t.Fatalf("stalled call %d; want 1", i)
	}
	// Request 1 hangs; the scheduler sleeps until request 2's time, 20ms.
	await.True(t, 5*time.Second, "the scheduler to sleep until 20ms", func() bool {
		at, ok := clk.nextWake()
		return ok && at.Equal(t0.Add(20*time.Millisecond))
	})
	clk.Set(t0.Add(50 * time.Millisecond))
	close(release)
	step(6) // requests 2-5 were overdue and went at 50ms
	step(7)
	rec := <-done

	want := []time.Duration{0, 10, 50, 50, 50, 50, 60, 70}
	sent := d.sentTimes()
	if len(sent) != len(want) {
		t.Fatalf("%d requests sent; want %d", len(sent), len(want))
	}
	for i, w := range want {
		if got := sent[i].Sub(t0); got != w*time.Millisecond {
			t.Errorf("request %d sent at %v; want %v", i, got, w*time.Millisecond)
		}
	}
	if rec.Requests != 8 {
		t.Errorf("recorded %d requests; want 8", rec.Requests)
	}
	// Latency from the schedule: 0, 40, 30, 20, 10, 0, 0, 0 ms.
	lat := rec.Latency.Summary()
	if lat.Max != 40*time.Millisecond {
		t.Errorf("max latency %v; want 40ms (request 1)", lat.Max)
	}
	if m := lat.Mean; m < 12500*time.Microsecond || m > 12510*time.Microsecond {
		t.Errorf("mean latency %v; want 12.5ms: (40+30+20+10)/8, measured from the schedule", m)
	}
	// Service time from the actual send: only request 1 took time.
	if m := rec.Service.Summary().Mean; m < 5*time.Millisecond || m > 5010*time.Microsecond {
		t.Errorf("mean service time %v; want 5ms: 40/8", m)
	}
	if rec.Late != 3 || rec.MaxLag != 30*time.Millisecond {
		t.Errorf("late %d, max lag %v; want 3 and 30ms (requests 2-4)", rec.Late, rec.MaxLag)
	}
}

// TestOpenLoopStopsAtDuration: at 1000/s for 10ms, exactly the requests
// scheduled before the end (t = 0..9ms) are sent.
func TestOpenLoopStopsAtDuration(t *testing.T) {
	clk := newManualClock()
	d := &fakeDriver{clk: clk}
	done := make(chan *Recording)
	go func() {
		rec, _ := Run(context.Background(), d, RunSpec{Workload: testWorkload(), Namespace: "t", Clock: clk,
			Load: Load{Concurrency: 4, Rate: 1000, Duration: 10 * time.Millisecond}})
		done <- rec
	}()
	var rec *Recording
	for rec == nil {
		select {
		case rec = <-done:
		default:
			if at, ok := clk.nextWake(); ok {
				clk.Set(at)
			}
			// Lets the run's goroutines act at the fake clock's new time
			// before it moves on: this loop is the test's clock, not a wait.
			time.Sleep(100 * time.Microsecond)
		}
	}
	if rec.Requests != 10 || d.ncalls() != 10 {
		t.Errorf("%d requests recorded, %d sent; want 10", rec.Requests, d.ncalls())
	}
}

func TestClosedLoopRequestBound(t *testing.T) {
	d := &fakeDriver{clk: SystemClock{}}
	rec, err := Run(context.Background(), d, RunSpec{Workload: testWorkload(), Namespace: "t",
		Load: Load{Concurrency: 4, Requests: 101}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Requests != 101 || d.ncalls() != 101 || rec.Checks != 101 || rec.AllowedRequests != 101 {
		t.Errorf("requests %d, sent %d, checks %d, allowed %d; want 101 each", rec.Requests, d.ncalls(), rec.Checks, rec.AllowedRequests)
	}
	if rec.Latency.Count() != 101 || len(rec.Arrivals) != 101 {
		t.Errorf("%d latencies, %d arrivals; want 101", rec.Latency.Count(), len(rec.Arrivals))
	}
}

// TestClosedLoopDurationBound: one client whose every request takes 10ms
// of the manual clock sends exactly ten in 100ms.
func TestClosedLoopDurationBound(t *testing.T) {
	clk := newManualClock()
	d := &fakeDriver{clk: clk}
	d.perCall = func(int) { clk.Advance(10 * time.Millisecond) }
	rec, err := Run(context.Background(), d, RunSpec{Workload: testWorkload(), Namespace: "t", Clock: clk,
		Load: Load{Concurrency: 1, Duration: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Requests != 10 {
		t.Errorf("%d requests; want 10", rec.Requests)
	}
	if rec.Elapsed != 100*time.Millisecond {
		t.Errorf("elapsed %v; want 100ms", rec.Elapsed)
	}
	if s := rec.Latency.Summary(); s.P50 != 10*time.Millisecond || s.Max != 10*time.Millisecond {
		t.Errorf("latency %+v; want 10ms each", s)
	}
	// Completions at 10, 20, ..., 100ms: nine in second 0, one in second 1.
	if len(rec.Series) != 1 || rec.Series[0].Requests != 10 {
		t.Errorf("series %+v; want 10 requests in second 0", rec.Series)
	}
}

func TestErrorsCountedByCode(t *testing.T) {
	d := &fakeDriver{clk: SystemClock{}, err: status.Error(codes.Unimplemented, "mode: LEASED is not implemented yet")}
	rec, err := Run(context.Background(), d, RunSpec{Workload: testWorkload(), Namespace: "t",
		Load: Load{Concurrency: 2, Requests: 20}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Errors["UNIMPLEMENTED"] != 20 || rec.ErrorCount() != 20 {
		t.Errorf("errors %v; want 20 UNIMPLEMENTED", rec.Errors)
	}
	if got := rec.FirstErrors["UNIMPLEMENTED"]; got != "mode: LEASED is not implemented yet" {
		t.Errorf("first error %q", got)
	}
	if rec.Latency.Count() != 0 || len(rec.Arrivals) != 0 || rec.AllowedRequests != 0 {
		t.Errorf("failed requests must not count as latency or arrivals: %d, %d", rec.Latency.Count(), len(rec.Arrivals))
	}
	if rec.Series[0].Errors != 20 {
		t.Errorf("series %+v", rec.Series)
	}
}

func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.Unavailable, "x"), "UNAVAILABLE"},
		{status.Error(codes.InvalidArgument, "x"), "INVALID_ARGUMENT"},
		{context.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{status.Error(codes.DeadlineExceeded, "x"), "DEADLINE_EXCEEDED"},
		{errors.New("boom"), "UNKNOWN"},
		{coded{"REDIS_ERROR"}, "REDIS_ERROR"},
	} {
		if got := ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %s; want %s", c.err, got, c.want)
		}
	}
}

type coded struct{ code string }

func (c coded) Error() string { return "coded" }
func (c coded) Code() string  { return c.code }

func TestArrivalTimes(t *testing.T) {
	// With the limiter's decision time, the accountant gets exactly that;
	// without, the midpoint of the round trip on the tool's clock.
	clk := newManualClock()
	d := &fakeDriver{clk: clk, decidedAt: func() int64 { return 42 }}
	rec, _ := Run(context.Background(), d, RunSpec{Workload: testWorkload(), Namespace: "t", Clock: clk,
		Load: Load{Concurrency: 1, Requests: 1}})
	if rec.Arrivals[0].At != 42 {
		t.Errorf("arrival at %d; want the decision time 42", rec.Arrivals[0].At)
	}
	d = &fakeDriver{clk: clk}
	d.perCall = func(int) { clk.Advance(10 * time.Millisecond) }
	sent := clk.Now()
	rec, _ = Run(context.Background(), d, RunSpec{Workload: testWorkload(), Namespace: "t", Clock: clk,
		Load: Load{Concurrency: 1, Requests: 1}})
	if want := sent.Add(5 * time.Millisecond).UnixNano(); rec.Arrivals[0].At != want {
		t.Errorf("arrival at %d; want the midpoint %d", rec.Arrivals[0].At, want)
	}
}

func TestArrivalBound(t *testing.T) {
	d := &fakeDriver{clk: SystemClock{}}
	rec, _ := Run(context.Background(), d, RunSpec{Workload: testWorkload(), Namespace: "t",
		Load: Load{Concurrency: 3, Requests: 50}, MaxArrivals: 10})
	if !rec.ArrivalsDropped || rec.Arrivals != nil {
		t.Errorf("over the bound: dropped %v, %d arrivals kept; want all dropped", rec.ArrivalsDropped, len(rec.Arrivals))
	}
}

func TestCancelInterrupts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &fakeDriver{clk: SystemClock{}}
	d.perCall = func(i int) {
		if i == 50 {
			cancel()
		}
	}
	rec, err := Run(ctx, d, RunSpec{Workload: testWorkload(), Namespace: "t",
		Load: Load{Concurrency: 2, Duration: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Interrupted || rec.Requests > 52 {
		t.Errorf("interrupted %v after %d requests; want it stopped at about 50", rec.Interrupted, rec.Requests)
	}
}

func TestRunRejectsBadSpecs(t *testing.T) {
	d := &fakeDriver{clk: SystemClock{}}
	for name, spec := range map[string]RunSpec{
		"no bound":         {Workload: testWorkload(), Load: Load{Concurrency: 1}},
		"no clients":       {Workload: testWorkload(), Load: Load{Requests: 1}},
		"bad algorithm":    {Workload: Workload{Distribution: Uniform, Keys: 1, Items: 1, Cost: 1, Limit: Limit{Algorithm: "x", Limit: 1, Period: time.Second}}, Load: Load{Concurrency: 1, Requests: 1}},
		"bad distribution": {Workload: Workload{Distribution: "pareto", Keys: 1, Items: 1, Cost: 1, Limit: Limit{Algorithm: "gcra", Limit: 1, Period: time.Second}}, Load: Load{Concurrency: 1, Requests: 1}},
	} {
		if _, err := Run(context.Background(), d, spec); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if d.ncalls() != 0 {
		t.Errorf("a rejected spec sent %d requests", d.ncalls())
	}
}

// TestSameBucketItemsAreOneArrival: a request naming one bucket twice is
// taken whole or not at all, so the accountant sees one arrival of the
// summed cost.
func TestSameBucketItemsAreOneArrival(t *testing.T) {
	d := &fakeDriver{clk: SystemClock{}}
	w := testWorkload()
	w.Distribution, w.Items = Hot, 3
	rec, err := Run(context.Background(), d, RunSpec{Workload: w, Namespace: "t", Load: Load{Concurrency: 1, Requests: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Arrivals) != 2 {
		t.Fatalf("%d arrivals; want one per request", len(rec.Arrivals))
	}
	for _, a := range rec.Arrivals {
		if a.Cost != 3 || a.Checks != 3 || !a.Admitted || a.Sent == 0 {
			t.Errorf("arrival %+v; want cost 3 standing for 3 admitted checks", a)
		}
	}
}
