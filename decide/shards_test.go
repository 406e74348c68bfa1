package decide

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/clock"
	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
)

// The engine's tests run it against real state machines (fsm.New), one per
// shard, behind an in-memory Shards that applies each batch as one command
// stamped by a manual clock, as a shard leader would. Shards can be taken
// down (no leader: a submit waits until its deadline and fails), made to
// fail lease grants, and split with the state machine's own fence and
// adopt, so refunds, reroutes, fail modes, the breaker and the caps are
// decided by the same code as in a cluster, without one: no process, no
// listener.

// manualClock moves only when told.
type manualClock = clock.Manual

func newClock() *manualClock {
	return clock.NewManual(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
}

// submitted is one Submit a test's Shards received.
type submitted struct {
	shard  int
	ops    []fsm.Op
	atomic bool
}

type fakeShards struct {
	clock *manualClock

	mu       sync.Mutex
	ring     *ring.Ring
	changed  chan struct{} // closed when ring changes
	m        map[int]*fsm.Machine
	index    uint64
	down     map[int]bool // no leader: submits wait for their deadline
	noGrants map[int]bool // lease grants and credits fail (outcome unknown)
	calls    []submitted
	// after, if set, is called (without mu) after each applied submit.
	after func(s int, a Applied)
}

func newShards(t testing.TB, n int, c *manualClock) *fakeShards {
	t.Helper()
	r, err := ring.New(n)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeShards{clock: c, ring: r, changed: make(chan struct{}), m: map[int]*fsm.Machine{},
		down: map[int]bool{}, noGrants: map[int]bool{}}
}

var errNoLeader = errors.New("test: shard has no leader")

func (f *fakeShards) Routes() (*ring.Ring, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ring, f.changed
}

func (f *fakeShards) Submit(ctx context.Context, s int, ops []fsm.Op, atomic bool) (Applied, error) {
	f.mu.Lock()
	f.calls = append(f.calls, submitted{shard: s, ops: slices.Clone(ops), atomic: atomic})
	if f.down[s] {
		f.mu.Unlock()
		<-ctx.Done()
		return Applied{}, errNoLeader
	}
	if k := ops[0].Kind; f.noGrants[s] && (k == fsm.OpGrant || k == fsm.OpCredit) {
		f.mu.Unlock()
		return Applied{}, errNoLeader
	}
	cmd := &fsm.Command{Now: f.clock.Now().UnixNano(), Ops: slices.Clone(ops)}
	if atomic {
		for j := range cmd.Ops {
			cmd.Ops[j].Group = 1
		}
	}
	m := f.machine(s)
	rs := m.Apply(cmd, nil)
	f.index++
	a := Applied{Results: rs, Index: f.index, Now: m.Now()}
	after := f.after
	f.mu.Unlock()
	if after != nil {
		after(s, a)
	}
	return a, nil
}

func (f *fakeShards) machine(s int) *fsm.Machine {
	m := f.m[s]
	if m == nil {
		m = fsm.New(fsm.Config{})
		f.m[s] = m
	}
	return m
}

func (f *fakeShards) setDown(s int, down bool) {
	f.mu.Lock()
	f.down[s] = down
	f.mu.Unlock()
}

// peek reads a bucket on shard s without changing it.
func (f *fakeShards) peek(s int, key string, l fsm.Limit) fsm.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.machine(s).Apply(&fsm.Command{Now: f.clock.Now().UnixNano(), Ops: []fsm.Op{{Kind: fsm.OpPeek, Key: key, Limit: l, Cost: 1}}}, nil)[0]
}

// take consumes cost from a bucket on shard s directly.
func (f *fakeShards) take(s int, key string, l fsm.Limit, cost int64) fsm.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.machine(s).Apply(&fsm.Command{Now: f.clock.Now().UnixNano(), Ops: []fsm.Op{{Kind: fsm.OpTake, Key: key, Limit: l, Cost: cost}}}, nil)[0]
}

// takesOf counts the Takes of key that shard s was sent.
func (f *fakeShards) takesOf(s int, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		for _, op := range c.ops {
			if c.shard == s && op.Key == key && op.Kind == fsm.OpTake {
				n++
			}
		}
	}
	return n
}

// grants counts the lease grants and credits the shards were asked for.
func (f *fakeShards) grants() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if k := c.ops[0].Kind; k == fsm.OpGrant || k == fsm.OpCredit {
			n++
		}
	}
	return n
}

func (f *fakeShards) submits(s int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.shard == s {
			n++
		}
	}
	return n
}

// fence starts a split of shard parent at hash at into shard child: the
// parent freezes the upper part of its range (and answers its keys
// fsm.ErrMoved) while the routing still sends them to it.
func (f *fakeShards) fence(t *testing.T, parent int, at uint64) (move fsm.Range) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	lo, hi, ok := f.ring.Routed(parent)
	if !ok || at <= lo || at > hi {
		t.Fatalf("split of shard %d at %#x: outside its range", parent, at)
	}
	move = fsm.Range{Lo: at, Hi: hi}
	if err := f.machine(parent).ApplyControl(&fsm.Control{Kind: fsm.CtlFence, Keep: fsm.Range{Lo: lo, Hi: at - 1}, Move: move}); err != nil {
		t.Fatal(err)
	}
	return move
}

// adopt finishes the split: the child loads the frozen range, and the
// routing sends the range to it.
func (f *fakeShards) adopt(parent, child int, move fsm.Range) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for seq := uint64(0); ; seq++ {
		chunk, last, err := f.machine(parent).ExportChunk(seq)
		if err != nil {
			return err
		}
		if err := f.machine(child).ApplyControl(&fsm.Control{Kind: fsm.CtlAdopt, Keep: move, Seq: seq, Last: last, Chunk: chunk}); err != nil {
			return err
		}
		if last {
			break
		}
	}
	bounds := append(f.ring.Bounds(), ring.Bound{Lo: move.Lo, Shard: child})
	slices.SortFunc(bounds, func(a, b ring.Bound) int {
		if a.Lo < b.Lo {
			return -1
		}
		return 1
	})
	r, err := ring.NewSplit(child+1, bounds)
	if err != nil {
		return err
	}
	f.ring = r
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

// keyOn returns a key of name that the routing sends to shard s.
func keyOn(t *testing.T, r *ring.Ring, name string, s int) string {
	t.Helper()
	for i := range 10_000 {
		k := fmt.Sprint("k", i)
		if r.ShardFor(ring.BucketKey(name, k)) == s {
			return k
		}
	}
	t.Fatalf("no key of %s on shard %d", name, s)
	return ""
}

// keyIn returns a key of name whose bucket hashes into rg.
func keyIn(t *testing.T, name string, rg fsm.Range) string {
	t.Helper()
	for i := range 10_000 {
		k := fmt.Sprint("k", i)
		if rg.Contains(keyhash.Sum(ring.BucketKey(name, k))) {
			return k
		}
	}
	t.Fatalf("no key of %s in %v", name, rg)
	return ""
}

// staticPolicies is a compiled set, caught up.
type staticPolicies struct{ snap *policy.Snapshot }

func (p staticPolicies) Policies() (*policy.Snapshot, bool) { return p.snap, true }

func compile(t testing.TB, doc string) staticPolicies {
	t.Helper()
	ps, err := policy.Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	return staticPolicies{snap}
}

// countingObserver keeps what the engine counts.
type countingObserver struct {
	mu     sync.Mutex
	counts map[string]int
}

func newObserver() *countingObserver { return &countingObserver{counts: map[string]int{}} }

func (o *countingObserver) add(k string, n int) {
	o.mu.Lock()
	o.counts[k] += n
	o.mu.Unlock()
}

func (o *countingObserver) get(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[k]
}

func (o *countingObserver) Request(mode, d string, _ time.Duration) { o.add("request/"+mode+"/"+d, 1) }
func (o *countingObserver) Item(mode, d, r string)                  { o.add("item/"+mode+"/"+d+"/"+r, 1) }
func (o *countingObserver) FailMode(out string)                     { o.add("fail/"+out, 1) }
func (o *countingObserver) Refunds(res string, n int)               { o.add("refund/"+res, n) }
func (o *countingObserver) Rerouted(out string, n int)              { o.add("rerouted/"+out, n) }
func (o *countingObserver) LeaseFallback()                          { o.add("lease-fallback", 1) }
func (o *countingObserver) PolicyOutcome(id, out string)            { o.add("policy/"+id+"/"+out, 1) }
func (o *countingObserver) CapsReset()                              { o.add("caps-reset", 1) }
func (o *countingObserver) RiskForgotten()                          { o.add("risk-forgotten", 1) }

// engine builds an engine over f with a short check timeout, so that a
// shard without a leader answers within a test's patience.
func engine(f *fakeShards, c *manualClock, mod func(*Config)) *Engine {
	cfg := Config{Shards: f, Clock: c.Now, CheckTimeout: 50 * time.Millisecond, BreakerFailures: 1000}
	if mod != nil {
		mod(&cfg)
	}
	return New(cfg)
}

// leased configures a lease table that renews only when a check asks
// (its rounds are minutes apart) and has no credits.
func leased(cfg *Config) {
	cfg.Lease = &lease.Config{Holder: "n1", TTL: time.Minute, RenewInterval: 20 * time.Second, AcquireWait: 5 * time.Second}
}

var tb10 = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Hour}

func tbItem(name, key string, limit int64) Item {
	return Item{Name: name, Key: key, Algorithm: fsm.TokenBucket, Limit: limit, Period: time.Hour, HasPeriod: true}
}
