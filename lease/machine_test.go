package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/internal/clock"
	"github.com/quorate/quorate/keyhash"
)

// These tests run the table against real state machines (fsm.New), one per
// shard, behind an in-memory Submitter that applies each batch as one
// command stamped by a manual clock, as a shard leader would: grants,
// renewals, returns and credits are decided by the same code as in a
// cluster, without one.

// manualClock moves only when told.
type manualClock = clock.Manual

func newClock() *manualClock {
	return clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// machines is a Submitter over one fsm.Machine per shard. It records every
// op it applied with its result.
type machines struct {
	clock *manualClock

	mu      sync.Mutex
	m       map[int]*fsm.Machine
	index   uint64
	applied []appliedOp
}

type appliedOp struct {
	shard int
	op    fsm.Op
	res   fsm.Result
}

func newMachines(c *manualClock) *machines {
	return &machines{clock: c, m: map[int]*fsm.Machine{}}
}

func (f *machines) Submit(ctx context.Context, shard int, ops []fsm.Op) (Applied, error) {
	if err := ctx.Err(); err != nil {
		return Applied{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.m[shard]
	if m == nil {
		m = fsm.New(fsm.Config{})
		f.m[shard] = m
	}
	ops = slices.Clone(ops) // the machine keeps nothing of them, but be safe
	rs := m.Apply(&fsm.Command{Now: f.clock.Now().UnixNano(), Ops: ops}, nil)
	f.index++
	for i := range ops {
		f.applied = append(f.applied, appliedOp{shard: shard, op: ops[i], res: rs[i]})
	}
	return Applied{Results: rs, Index: f.index, Now: m.Now()}, nil
}

// take is a strict check, as the caller of Spend makes for a Miss.
func (f *machines) take(shard int, key string, l fsm.Limit, cost int64) bool {
	a, err := f.Submit(context.Background(), shard, []fsm.Op{{Kind: fsm.OpTake, Key: key, Limit: l, Cost: cost}})
	return err == nil && a.Results[0].Allowed
}

// remaining is what the shard's bucket has left now (a Peek).
func (f *machines) remaining(t *testing.T, shard int, key string, l fsm.Limit) int64 {
	t.Helper()
	a, err := f.Submit(context.Background(), shard, []fsm.Op{{Kind: fsm.OpPeek, Key: key, Limit: l}})
	if err != nil || a.Results[0].Err != nil {
		t.Fatalf("peek %q: %v %v", key, err, a.Results[0].Err)
	}
	return a.Results[0].Remaining
}

// ledger sums, per bucket key, what the machines granted in leases and
// what the returns sent back (the units a node gave up, whatever the
// machine credited).
func (f *machines) ledger() (granted, returned map[string]int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	granted, returned = map[string]int64{}, map[string]int64{}
	keyOf := map[uint64]string{} // lease ID to key, per shard (IDs are per machine)
	for _, a := range f.applied {
		switch a.op.Kind {
		case fsm.OpGrant:
			if a.res.Granted > 0 {
				granted[a.op.Key] += a.res.Granted
				keyOf[uint64(a.shard)<<48|a.res.Lease] = a.op.Key
			}
		case fsm.OpReturn:
			returned[keyOf[uint64(a.shard)<<48|a.op.Lease]] += a.op.Cost
		}
	}
	return granted, returned
}

func (f *machines) count(kind fsm.OpKind) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, a := range f.applied {
		if a.op.Kind == kind {
			n++
		}
	}
	return n
}

// counts is a Metrics that counts.
type counts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *counts) add(name string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[name] += n
}

func (c *counts) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[name]
}

func (c *counts) GrantWait(time.Duration)       {}
func (c *counts) Grant(result string)           { c.add("grant:"+result, 1) }
func (c *counts) Returned(result string, n int) { c.add("return:"+result, n) }
func (c *counts) Credit(result string)          { c.add("credit:"+result, 1) }
func (c *counts) CreditDecision()               { c.add("credit decision", 1) }
func (c *counts) Shed(queue string)             { c.add("shed:"+queue, 1) }

// node is one table on the machines, with its grant workers running and
// its renewal rounds left to the test (round).
type node struct {
	*Table
	metrics *counts
	close   func() // Close, once
}

func newNode(t *testing.T, f *machines, cfg Config) *node {
	t.Helper()
	m := &counts{}
	cfg.Clock, cfg.Metrics = f.clock.Now, m
	lt := newTable(f, cfg)
	for range lt.cfg.Workers {
		lt.wg.Add(1)
		go lt.worker()
	}
	close := sync.OnceFunc(lt.Close)
	t.Cleanup(close)
	return &node{Table: lt, metrics: m, close: close}
}

func (n *node) spend(key string, l fsm.Limit, cost int64, shard int) Spent {
	return n.Spend(context.Background(), []Item{{Key: key, Hash: keyhash.Sum(key), Limit: l, Cost: cost, Shard: shard}})[0]
}

// slow is a limit that does not refill measurably while a test's clock
// moves a few seconds, so what the machine holds is exact.
var slow = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 100, Period: 24 * time.Hour}

// TestSpendRenewReturn takes a bucket through a lease's life on a real
// state machine: the first check's grant carries its cost, spending below
// the low-water mark renews (the unspent units carried over), an expired
// lease's units are void, and an idle bucket is returned whole. At every
// step the machine's bucket, the node's budget and what it admitted add up
// to the capacity.
func TestSpendRenewReturn(t *testing.T) {
	clk := newClock()
	f := newMachines(clk)
	n := newNode(t, f, Config{Holder: "n1", TTL: 4 * time.Second, RenewInterval: 500 * time.Millisecond})
	const key, shard = "api\x00k", 2
	var admitted, voided int64
	balance := func(step string) {
		t.Helper()
		held, left := n.Held(), f.remaining(t, shard, key, slow)
		if left+held+admitted+voided != slow.Capacity() {
			t.Fatalf("%s: machine %d + held %d + admitted %d + void %d != capacity %d", step, left, held, admitted, voided, slow.Capacity())
		}
	}

	// First use: no budget, so the check joins the first grant, which asks
	// for the lease (capacity/8 = 12, on top of the low-water mark 1) plus
	// the check's cost, and decides it in the same command.
	sp := n.spend(key, slow, 1, shard)
	if sp.Outcome != Hit || sp.Left != 13 {
		t.Fatalf("first check: %v, %d left; want a hit with 13 left", sp.Outcome, sp.Left)
	}
	admitted++
	if g := f.count(fsm.OpGrant); g != 1 || n.metrics.get("grant:acquired") != 1 {
		t.Fatalf("%d grants applied, %d acquired; want 1", g, n.metrics.get("grant:acquired"))
	}
	if want := clk.Now().Add(4 * time.Second * 9 / 10).UnixNano(); sp.Deadline() != want {
		t.Fatalf("deadline %d, want the grant's send time plus 0.9·TTL = %d", sp.Deadline(), want)
	}
	balance("after the first grant")

	// Spend down to the low-water mark: falling below it queues a renewal,
	// which lands while the lease is live and adds to what is left.
	for i := range 13 {
		if sp := n.spend(key, slow, 1, shard); sp.Outcome != Hit || sp.Left != int64(12-i) {
			t.Fatalf("spend %d: %v, %d left", i, sp.Outcome, sp.Left)
		}
		admitted++
	}
	await.True(t, 10*time.Second, "the renewal", func() bool { return n.metrics.get("grant:renewed") == 1 })
	balance("after the renewal")
	if held := n.Held(); held != 13 {
		t.Fatalf("after the renewal the node holds %d, want 13 (the level: 12 + low water 1)", held)
	}

	// The lease expires unspent: its units are void (the machine keeps
	// them deducted: under-admission), and the next check's grant replaces
	// them rather than adding to them.
	clk.Advance(4 * time.Second)
	voided = n.Held()
	sp = n.spend(key, slow, 1, shard)
	if sp.Outcome != Hit {
		t.Fatalf("check after the lease lapsed: %v", sp.Outcome)
	}
	admitted++
	balance("after a lapse")
	if held := n.Held(); held != sp.Left {
		t.Fatalf("after a lapse the node holds %d, want only the new grant's %d", held, sp.Left)
	}

	// Shutting down returns what the node holds of its live lease: the
	// machine has it back, and nothing is left at the node.
	n.close()
	if n.Held() != 0 || n.lookup(key, keyhash.Sum(key)) != nil {
		t.Fatalf("budget kept after close: %d held", n.Held())
	}
	if n.metrics.get("return:ok") != 1 || f.count(fsm.OpReturn) != 1 {
		t.Fatalf("returns: %d counted, %d applied; want 1", n.metrics.get("return:ok"), f.count(fsm.OpReturn))
	}
	balance("after the return")
}

// TestIdleBucketDropped: a bucket not spent for a lease lifetime is handed
// back and forgotten. Its return reaches the machine at about the time the
// lease expires there, so the machine may credit nothing for it: never more
// than the lease granted, and never more than the node held.
func TestIdleBucketDropped(t *testing.T) {
	clk := newClock()
	f := newMachines(clk)
	n := newNode(t, f, Config{Holder: "n1", TTL: 4 * time.Second, RenewInterval: 500 * time.Millisecond})
	const key, shard = "api\x00k", 0
	var admitted int64
	for range 5 {
		if sp := n.spend(key, slow, 2, shard); sp.Outcome != Hit {
			t.Fatalf("spend: %v", sp.Outcome)
		}
		admitted += 2
	}
	e := n.lookup(key, keyhash.Sum(key))
	for i := 0; n.lookup(key, keyhash.Sum(key)) != nil; i++ {
		if i == 20 {
			t.Fatal("an idle bucket was kept for 10s with a 4s lease TTL")
		}
		clk.Advance(500 * time.Millisecond)
		n.round(clk.Now())
		await.True(t, 10*time.Second, "renewals to land", func() bool { return !e.renewing.Load() })
	}
	if n.Held() != 0 || n.metrics.get("return:ok") != 1 {
		t.Fatalf("after the drop: %d held, %d returns", n.Held(), n.metrics.get("return:ok"))
	}
	if left := f.remaining(t, shard, key, slow); left+admitted > slow.Capacity() {
		t.Fatalf("machine %d + admitted %d > capacity %d", left, admitted, slow.Capacity())
	}
	for _, a := range f.applied {
		if a.op.Kind == fsm.OpReturn {
			t.Logf("idle return of %d units: the machine credited %d (lease found: %t)", a.op.Cost, a.res.Granted, a.res.Allowed)
		}
	}
}

// TestCreditSpendHandOver: with a shard's credit, a key the node has never
// leased is decided locally from the credit, up to its allowance; the use
// that reaches the cushion asks for an ordinary lease in the background,
// which then serves the key. The machine starts the key's bucket below
// capacity by the credit's allowance, so what the credit may still admit is
// covered.
func TestCreditSpendHandOver(t *testing.T) {
	clk := newClock()
	f := newMachines(clk)
	n := newNode(t, f, Config{Holder: "n1", TTL: 5 * time.Second, CreditTTL: 20 * time.Second, RenewInterval: 500 * time.Millisecond})
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1000, Period: time.Second} // allowance 8; the clock does not move
	a := fsm.CreditAllowance(l)
	if a != fsm.MaxCreditUnits {
		t.Fatalf("allowance %d", a)
	}
	const shard = 1

	// The first miss on the shard asks for its credit; the check itself
	// joins a lease grant.
	if sp := n.spend("api\x00first", l, 1, shard); sp.Outcome != Hit {
		t.Fatalf("first check: %v", sp.Outcome)
	}
	await.True(t, 10*time.Second, "the credit", func() bool { return n.metrics.get("credit:granted") == 1 })
	grants := f.count(fsm.OpGrant)

	key := "api\x00fresh"
	for i := range a - creditCushion {
		sp := n.spend(key, l, 1, shard)
		if sp.Outcome != Credited || sp.Left != a-i-1 {
			t.Fatalf("use %d: %v, %d left; want from the credit, %d left", i+1, sp.Outcome, sp.Left, a-i-1)
		}
		// Spendable until the credit's lifetime less a tenth, from when it
		// was asked for (the clock has not moved).
		if want := clk.Now().Add(18 * time.Second).UnixNano(); sp.Deadline() != want {
			t.Fatalf("credit deadline %d, want %d", sp.Deadline(), want)
		}
		if i+1 < a-creditCushion && f.count(fsm.OpGrant) != grants {
			t.Fatalf("use %d of the credit asked for a lease before the cushion", i+1)
		}
	}
	if n.metrics.get("credit decision") != int(a-creditCushion) {
		t.Fatalf("credit decisions counted: %d", n.metrics.get("credit decision"))
	}
	// Reaching the cushion asked for a lease.
	await.True(t, 10*time.Second, "the hand-over grant", func() bool { return f.count(fsm.OpGrant) == grants+1 })
	await.True(t, 10*time.Second, "the hand-over grant to land", func() bool { return n.lookup(key, keyhash.Sum(key)).deadline.Load() > 0 })
	sp := n.spend(key, l, 1, shard)
	if sp.Outcome != Hit {
		t.Fatalf("after the hand-over: %v, want a hit from the lease", sp.Outcome)
	}
	// The bucket came into being at the grant, charged the credit's whole
	// allowance (its holder may still spend the cushion).
	granted, _ := f.ledger()
	left := f.remaining(t, shard, key, l)
	if left != l.Capacity()-a-granted[key] {
		t.Fatalf("machine has %d; want capacity %d - allowance %d - granted %d", left, l.Capacity(), a, granted[key])
	}
}

// TestConcurrentSpendNeverExceedsGrants: nodes' checks spending a scarce
// bucket from many goroutines, with renewal rounds and returns running,
// never admit more than their grants brought, less what they returned; and
// the nodes together never more than the bucket had. Run it with -race.
func TestConcurrentSpendNeverExceedsGrants(t *testing.T) {
	clk := newClock()
	f := newMachines(clk)
	// The clock does not move, so nothing refills: a scarce bucket, a
	// contended one and one with room to spare (whose budgets are returned).
	keys := []string{"api\x00a", "api\x00b", "api\x00c"}
	limits := map[string]fsm.Limit{}
	for k, n := range map[string]int64{keys[0]: 2000, keys[1]: 10_000, keys[2]: 100_000} {
		limits[k] = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: n, Period: 24 * time.Hour}
	}
	var nodes []*node
	for i := range 3 {
		nodes = append(nodes, newNode(t, f, Config{Holder: fmt.Sprint("n", i), TTL: 4 * time.Second, RenewInterval: 100 * time.Millisecond, Workers: 2}))
	}
	admitted := make([]map[string]*atomic.Int64, len(nodes))
	for i := range nodes {
		admitted[i] = map[string]*atomic.Int64{}
		for _, k := range keys {
			admitted[i][k] = &atomic.Int64{}
		}
	}
	stop := make(chan struct{})
	var rounds sync.WaitGroup
	for _, n := range nodes {
		rounds.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				n.round(clk.Now())
			}
		})
	}
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			ni := g % len(nodes)
			n := nodes[ni]
			for range 1500 {
				k := keys[rng.IntN(len(keys))]
				cost := 1 + rng.Int64N(3)
				items := []Item{{Key: k, Hash: keyhash.Sum(k), Limit: limits[k], Cost: cost, Shard: 0}}
				if rng.IntN(4) == 0 { // two buckets in one request, sometimes denied as a whole
					k2 := keys[rng.IntN(len(keys))]
					items = append(items, Item{Key: k2, Hash: keyhash.Sum(k2), Limit: limits[k2], Cost: 1, Shard: 0})
				}
				sp := n.Spend(context.Background(), items)
				all := true
				for _, s := range sp {
					all = all && (s.Outcome == Hit || s.Outcome == Credited)
				}
				for j, s := range sp {
					if s.Outcome != Hit && s.Outcome != Credited {
						continue
					}
					if !all {
						s.Refund(items[j].Cost) // the caller denies the request as a whole
						continue
					}
					admitted[ni][items[j].Key].Add(items[j].Cost)
				}
			}
		})
	}
	wg.Wait()
	// Idle now: the rounds give every budget back.
	await.True(t, 10*time.Second, "idle budgets to be returned", func() bool {
		for _, n := range nodes {
			if n.Held() != 0 {
				return false
			}
		}
		return true
	})
	close(stop)
	rounds.Wait()

	granted, returned := f.ledger()
	var total int64
	for _, k := range keys {
		var sum int64
		for i := range nodes {
			sum += admitted[i][k].Load()
		}
		total += sum
		// Nodes never hold more than granted, so never admit more.
		if sum+returned[k] > granted[k] {
			t.Errorf("%q: admitted %d + returned %d > granted %d", k, sum, returned[k], granted[k])
		}
		// And the nodes together never more than the bucket gave.
		c := limits[k].Capacity()
		left := f.remaining(t, 0, k, limits[k])
		if sum > c-left {
			t.Errorf("%q: admitted %d, but the bucket gave only %d of %d", k, sum, c-left, c)
		}
		t.Logf("%q: capacity %d, admitted %d, granted %d, returned %d, the bucket has %d", k, c, sum, granted[k], returned[k], left)
	}
	// The demand (about 12·1500·2.25 units) exceeds the scarce buckets, so
	// both must have been spent out.
	if total < 12_000 {
		t.Errorf("admitted %d: the test exercised too little", total)
	}
	if f.count(fsm.OpReturn) == 0 {
		t.Error("nothing was returned: the test exercised too little")
	}
}

// TestAdmissionBound simulates nodes checking a few keys with changing
// demand, on a clock that moves in small steps, with grants, renewals,
// returns, credits and strict fallbacks on a real state machine, and checks
// that over every interval [s, t] of decision times, what the nodes
// admitted on each key is at most what an exact token bucket allows:
// burst + ⌊rate·(t − s)⌋ (the bench accountant's definition; issue 13,
// finding 5: budget spent late from an early grant used to exceed it).
func TestAdmissionBound(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { admissionRun(t, seed) })
	}
}

func admissionRun(t *testing.T, seed uint64) {
	clk := newClock()
	f := newMachines(clk)
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 50, Period: time.Second, Burst: 100}
	const (
		nNodes = 3
		nKeys  = 4
		step   = 10 * time.Millisecond
		steps  = 2000 // 20s
		ri     = 500 * time.Millisecond
	)
	rng := rand.New(rand.NewPCG(seed, 7))
	var nodes []*node
	for i := range nNodes {
		nodes = append(nodes, newNode(t, f, Config{
			Holder: fmt.Sprint("n", i), TTL: 2 * time.Second, CreditTTL: 8 * time.Second,
			RenewInterval: ri, AcquireWait: time.Minute, Workers: 2,
		}))
	}
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("api\x00k%d", i)
	}
	type key struct {
		first    time.Time
		admitted int64
		leased   int64
		events   []admission
	}
	state := map[string]*key{}
	// rate[n][k] is node n's checks per step on key k; it changes now and
	// then, so demand rises, drops (excess returns) and stops (idle returns).
	rate := make([][]float64, nNodes)
	for i := range rate {
		rate[i] = make([]float64, nKeys)
	}
	var worst float64 // the highest admitted / bound seen
	for s := range steps {
		if s%100 == 0 {
			for i := range rate {
				for k := range rate[i] {
					rate[i][k] = []float64{0, 0, 0.05, 0.3, 1, 3}[rng.IntN(6)]
				}
			}
		}
		now := clk.Now()
		for ni, n := range nodes {
			for k, kname := range keys {
				checks := int(rate[ni][k])
				if rng.Float64() < rate[ni][k]-float64(checks) {
					checks++
				}
				for range checks {
					cost := 1 + rng.Int64N(2)
					sp := n.spend(kname, l, cost, k%2)
					ok := sp.Outcome == Hit || sp.Outcome == Credited
					if sp.Outcome == Miss { // the caller decides it strictly
						ok = f.take(k%2, kname, l, cost)
					}
					if !ok {
						continue
					}
					st := state[kname]
					if st == nil {
						st = &key{first: now}
						state[kname] = st
					}
					st.admitted += cost
					st.events = append(st.events, admission{now.UnixNano(), cost})
					if sp.Outcome == Hit || sp.Outcome == Credited {
						st.leased += cost
					}
					bound := l.Capacity() + int64(now.Sub(st.first))*l.Limit/int64(l.Period)
					if st.admitted > bound {
						t.Fatalf("seed %d: key %q admitted %d by %v after its first admission; an exact token bucket allows %d",
							seed, kname, st.admitted, now.Sub(st.first), bound)
					}
					worst = max(worst, float64(st.admitted)/float64(bound))
				}
			}
		}
		clk.Advance(step)
		if (s+1)%int(ri/step) == 0 {
			for _, n := range nodes {
				n.round(clk.Now())
			}
		}
	}
	var admitted, leased int64
	for k, st := range state {
		admitted += st.admitted
		leased += st.leased
		if over := worstInterval(st.events, l); over.excess > 0 {
			t.Fatalf("seed %d: key %q admitted %d in [%v, %v] (%v); an exact token bucket allows %d",
				seed, k, over.admitted, time.Duration(over.from-st.first.UnixNano()), time.Duration(over.to-st.first.UnixNano()),
				time.Duration(over.to-over.from), over.admitted-over.excess)
		}
	}
	// The demand exceeds the limit most of the time: a run that admits
	// little, or nothing locally, exercised nothing.
	allowed := int64(nKeys) * (l.Capacity() + int64(steps*step)*l.Limit/int64(l.Period))
	if admitted < allowed/2 || leased < admitted/2 {
		t.Fatalf("seed %d: admitted %d (%d locally) of at most %d: too little to test the bound", seed, admitted, leased, allowed)
	}
	var credited int
	for _, n := range nodes {
		credited += n.metrics.get("credit decision")
	}
	t.Logf("seed %d: admitted %d of at most %d (%d locally, %d from credits), highest admitted/bound %.3f; %d grants, %d returns, %d credits",
		seed, admitted, allowed, leased, credited, worst, f.count(fsm.OpGrant), f.count(fsm.OpReturn), f.count(fsm.OpCredit))
}

// admission is units admitted at a decision time (Unix ns).
type admission struct{ at, n int64 }

type interval struct{ from, to, admitted, excess int64 }

// worstInterval finds the interval [s, t] of decision times where the
// admissions (in time order) most exceed burst + ⌊rate·(t − s)⌋.
func worstInterval(as []admission, l fsm.Limit) interval {
	var worst interval
	for j := range as {
		var sum int64
		for i := j; i >= 0; i-- {
			sum += as[i].n
			if i > 0 && as[i-1].at == as[i].at {
				continue // an interval starting at s holds all of s's admissions
			}
			bound := l.Capacity() + (as[j].at-as[i].at)*l.Limit/int64(l.Period)
			if ex := sum - bound; ex > worst.excess {
				worst = interval{as[i].at, as[j].at, sum, ex}
			}
		}
	}
	return worst
}
