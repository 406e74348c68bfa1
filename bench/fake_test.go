package bench

import (
	"context"
	"sort"
	"sync"
	"time"
)

// manualClock is a Clock that moves only when the test says so. A
// SleepUntil blocks until the test sets the time past its deadline.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
}

type waiter struct {
	at   time.Time
	wake chan struct{}
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.mu.Lock()
	if !t.After(c.now) {
		c.mu.Unlock()
		return ctx.Err()
	}
	w := &waiter{at: t, wake: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Set moves the clock to t and wakes the sleepers whose time has come.
func (c *manualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if t.Before(w.at) {
			keep = append(keep, w)
			continue
		}
		close(w.wake)
	}
	c.waiters = keep
}

// Advance moves the clock forward by d.
func (c *manualClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// nextWake is the earliest time a sleeper waits for.
func (c *manualClock) nextWake() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.waiters) == 0 {
		return time.Time{}, false
	}
	ws := append([]*waiter(nil), c.waiters...)
	sort.Slice(ws, func(i, j int) bool { return ws[i].at.Before(ws[j].at) })
	return ws[0].at, true
}

// fakeDriver answers every check at once (or when released, for stalled
// calls), allowing it, and remembers what it was sent and when.
type fakeDriver struct {
	clk Clock
	// err, if set, fails every call.
	err error
	// decidedAt, if set, gives each outcome a decision time.
	decidedAt func() int64
	// allow decides each item (nil: allow all).
	allow func(it Item) bool
	// perCall runs at the start of each call, with its index.
	perCall func(i int)

	mu     sync.Mutex
	calls  []fakeCall
	stalls map[int]chan struct{}
	called chan int // receives the index of each stalled call when it starts
}

type fakeCall struct {
	sent  time.Time
	items []Item
}

func (d *fakeDriver) stall(i int) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stalls == nil {
		d.stalls = map[int]chan struct{}{}
	}
	ch := make(chan struct{})
	d.stalls[i] = ch
	return ch
}

func (d *fakeDriver) Check(ctx context.Context, items []Item, out []Outcome) error {
	d.mu.Lock()
	i := len(d.calls)
	d.calls = append(d.calls, fakeCall{sent: d.clk.Now(), items: append([]Item(nil), items...)})
	release := d.stalls[i]
	d.mu.Unlock()
	if d.perCall != nil {
		d.perCall(i)
	}
	if release != nil {
		if d.called != nil {
			d.called <- i
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if d.err != nil {
		return d.err
	}
	for j, it := range items {
		out[j] = Outcome{Allowed: true, Reason: ReasonWithinLimit}
		if d.allow != nil && !d.allow(it) {
			out[j] = Outcome{Reason: ReasonOverLimit}
		}
		if d.decidedAt != nil {
			out[j].DecidedAt = d.decidedAt()
		}
	}
	return nil
}

func (d *fakeDriver) Close() error { return nil }

func (d *fakeDriver) sentTimes() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]time.Time, len(d.calls))
	for i, c := range d.calls {
		out[i] = c.sent
	}
	return out
}

func (d *fakeDriver) ncalls() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}

func testWorkload() Workload {
	return Workload{Distribution: Uniform, Keys: 100, Items: 1, Cost: 1,
		Limit: Limit{Algorithm: "token_bucket", Limit: 10, Period: time.Second}}
}
