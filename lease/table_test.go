package lease

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/keyhash"
)

// bareTable is a lease table without workers, for testing the spend path.
func bareTable() *Table {
	lt := &Table{wake: make(chan *entry, 16), stop: make(chan struct{})}
	lt.cfg.setDefaults()
	for i := range lt.shards {
		lt.shards[i].m = map[uint64]*entry{}
	}
	return lt
}

func (lt *Table) put(key string, budget int64, deadline time.Time) *entry {
	e := &entry{key: key, hash: keyhash.Sum(key), limit: fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 100, Period: time.Second}}
	e.budget.Store(budget)
	e.deadline.Store(deadline.UnixNano())
	h := keyhash.Sum(key)
	lt.shardOf(h).m[h] = e
	return e
}

func TestLeaseSpend(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lt := bareTable()
	e := lt.put("api\x00k", 5, t0.Add(time.Second))
	e.lowWater.Store(2)
	steps := []struct {
		cost    int64
		at      time.Duration
		want    Outcome
		left    int64
		signals bool
	}{
		{cost: 2, want: Hit, left: 3},
		{cost: 2, want: Hit, left: 1, signals: true}, // below low water: renewal queued
		{cost: 2, want: Miss},                        // not enough budget: never a partial spend
		{cost: 1, want: Hit, left: 0},
		{cost: 1, want: Miss},
	}
	for i, s := range steps {
		out, left, _ := lt.spend(e, s.cost, t0.Add(s.at).UnixNano())
		if out != s.want || (out == Hit && left != s.left) {
			t.Fatalf("step %d: spend(%d) = %v, %d; want %v, %d", i, s.cost, out, left, s.want, s.left)
		}
		if s.signals && len(lt.wake) != 1 {
			t.Fatalf("step %d: falling below low water did not queue a renewal", i)
		}
	}
	// A refund (the request was denied as a whole) puts budget back.
	_, _, gen := lt.spend(e, 0, t0.UnixNano())
	e.refund(3, gen)
	if out, left, _ := lt.spend(e, 3, t0.UnixNano()); out != Hit || left != 0 {
		t.Fatalf("after refund: %v %d", out, left)
	}
	// Not after a renewal declared the budget to the shard: the shard
	// counts the refunded units as spent.
	e.budget.Store(2)
	e.lease = 1
	_, _, gen = lt.spend(e, 1, t0.UnixNano())
	e.mu.Lock()
	lt.renewal(e, t0.UnixNano())
	e.mu.Unlock()
	e.refund(1, gen)
	if b := e.budget.Load(); b > e.kept {
		t.Fatalf("a refund after the renewal raised the budget to %d, above the %d declared", b, e.kept)
	}
	// Budget past its deadline is void, whatever is left.
	e.budget.Store(10)
	if out, _, _ := lt.spend(e, 1, t0.Add(time.Second).UnixNano()); out != Miss {
		t.Fatalf("spend at the deadline: %v, want miss", out)
	}
	// An exhausted bucket denies locally until its retry time.
	e.denyUntil.Store(t0.Add(2 * time.Second).UnixNano())
	if out, _, _ := lt.spend(e, 1, t0.Add(1500*time.Millisecond).UnixNano()); out != Deny {
		t.Fatalf("spend while the bucket is empty: %v, want deny", out)
	}
	if out, _, _ := lt.spend(e, 1, t0.Add(2*time.Second).UnixNano()); out != Miss {
		t.Fatalf("spend after the retry time: %v, want miss", out)
	}
	if got := lt.lookup("api\x00other", keyhash.Sum("api\x00other")); got != nil {
		t.Fatal("lookup of an unknown key found an entry")
	}
}

// TestLeaseSpendConcurrent: many goroutines spending one budget never
// spend more than it holds.
func TestLeaseSpendConcurrent(t *testing.T) {
	lt := bareTable()
	e := lt.put("api\x00hot", 10_000, time.Now().Add(time.Hour))
	var hits atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 2000 {
				if out, _, _ := lt.spend(e, 1, time.Now().UnixNano()); out == Hit {
					hits.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if hits.Load() != 10_000 || e.budget.Load() != 0 {
		t.Fatalf("16000 spends of a 10000 budget: %d hits, %d left", hits.Load(), e.budget.Load())
	}
}

// BenchmarkLeasedSpend is the leased hot path: find the bucket's entry and
// take from its budget. Target: under 100ns, no allocation.
func BenchmarkLeasedSpend(b *testing.B) {
	lt := bareTable()
	key := "api\x00user:42"
	e := lt.put(key, 1<<62, time.Now().Add(time.Hour))
	h := keyhash.Sum(key)
	now := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if lt.lookup(key, h) != e {
			b.Fatal("lookup")
		}
		if out, _, _ := lt.spend(e, 1, now); out != Hit {
			b.Fatal("miss")
		}
	}
}

// BenchmarkLeasedSpendParallel spends on 1024 keys from all CPUs.
func BenchmarkLeasedSpendParallel(b *testing.B) {
	lt := bareTable()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "api\x00user:" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		lt.put(keys[i], 1<<62, time.Now().Add(time.Hour))
	}
	now := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			k := keys[i%len(keys)]
			i++
			e := lt.lookup(k, keyhash.Sum(k))
			if out, _, _ := lt.spend(e, 1, now); out != Hit {
				b.Fatal("miss")
			}
		}
	})
}

// TestLeaseJoin: checks that find no budget join the grant not yet sent,
// adding their costs to it; once a grant is sealed (in flight), checks
// cannot join it, and those that joined the next one get it queued when
// the one in flight ends.
func TestLeaseJoin(t *testing.T) {
	lt := bareTable()
	e := lt.put("api\x00k", 0, time.Time{})
	a := lt.join(e, 2)
	if b := lt.join(e, 3); a == nil || b != a || a.carry != 5 {
		t.Fatalf("two joins before the grant is sent: %p %p carry %d; want one attempt carrying 5", a, b, a.carry)
	}
	// The worker sends the grant as it builds the request (grantShard).
	e.mu.Lock()
	sent := e.next
	e.inflight, e.next = sent, nil
	e.mu.Unlock()
	if c := lt.join(e, 1); c != nil {
		t.Fatal("a check joined a grant already in flight")
	}
	e.renewing.Store(true)
	lt.finish(e, sent)
	select {
	case <-sent.done:
	default:
		t.Fatal("finishing the grant did not wake the checks it carried")
	}
	if len(lt.wake) != 0 {
		t.Fatal("a grant was queued though no check waits for one")
	}
	// A check joins while the next grant is in flight: queued when it ends.
	e.renewing.Store(true)
	inflight := &attempt{done: make(chan struct{})}
	e.mu.Lock()
	e.inflight = inflight
	e.mu.Unlock()
	lt.finish(e, inflight)
	if d := lt.join(e, 1); d == nil || d == sent {
		t.Fatal("after a grant ends, a check must join a new one")
	}
	// It joined while another grant was in flight (its signal was a no-op).
	inflight2 := &attempt{done: make(chan struct{})}
	e.renewing.Store(true)
	e.mu.Lock()
	e.inflight = inflight2
	e.mu.Unlock()
	lt.finish(e, inflight2)
	if len(lt.wake) != 1 {
		t.Fatal("a check waits for a grant that was never queued")
	}
}

// A lease in use is renewed ahead of its deadline by two rounds plus four
// grant latencies (the latency counted up to one round), so that a renewal
// lands before the lease lapses even when the next round comes late and the
// grant is slow; a lapse sends every check to a grant until the renewal
// lands. The lead is at most half of the 0.9·TTL a node spends a lease for,
// so a fresh lease is never renewed at once.
func TestLeaseRenewsBeforeLapse(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const ri = 500 * time.Millisecond
	for _, c := range []struct {
		ttl, lat, left time.Duration
		renew          bool
	}{
		// Lead 1s + 200ms.
		{ttl: 5 * time.Second, lat: 50 * time.Millisecond, left: 1190 * time.Millisecond, renew: true},
		{ttl: 5 * time.Second, lat: 50 * time.Millisecond, left: 1210 * time.Millisecond, renew: false},
		// A slow shard: the latency counts up to one round, lead 1s + 2s.
		{ttl: 10 * time.Second, lat: 900 * time.Millisecond, left: 2900 * time.Millisecond, renew: true},
		{ttl: 10 * time.Second, lat: 900 * time.Millisecond, left: 3100 * time.Millisecond, renew: false},
		// Short TTLs: at most 0.45·TTL ahead, never right after a grant.
		{ttl: 2 * time.Second, lat: 100 * time.Millisecond, left: 800 * time.Millisecond, renew: true},
		{ttl: 2 * time.Second, lat: 100 * time.Millisecond, left: 1800 * time.Millisecond, renew: false},
		{ttl: time.Second, lat: 10 * time.Millisecond, left: 900 * time.Millisecond, renew: false},
	} {
		lt := bareTable()
		lt.cfg = Config{TTL: c.ttl, RenewInterval: ri}
		e := lt.put("api\x00k", 1000, now.Add(c.left))
		e.grantLat = c.lat
		e.spent.Store(10) // in use this round
		if idle := lt.tick(e, now); idle {
			t.Fatalf("TTL %v, grants %v, %v left: reported idle", c.ttl, c.lat, c.left)
		}
		if got := len(lt.wake) == 1; got != c.renew {
			t.Errorf("TTL %v, grants %v, %v left: renewal queued = %v, want %v", c.ttl, c.lat, c.left, got, c.renew)
		}
	}
}

// A renewal tops the budget up to the level a node holds right after a
// grant (demand over the next interval, plus the reserve, on top of the
// low-water mark) and never beyond: a node whose demand dropped gives the
// excess back, from the budget at once, up to what its lease granted.
func TestLeaseRenewalSize(t *testing.T) {
	lt := bareTable()
	lt.cfg = Config{TTL: 4 * time.Second, RenewInterval: 500 * time.Millisecond}
	// 10/s: want = 10·(0.5s + ¾·4s) = 35; level = 35 + low water 20 = 55.
	setup := func(budget int64) *entry {
		e := lt.put("api\x00k", budget, time.Now().Add(time.Second))
		e.limit = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1000, Period: time.Second}
		e.rate, e.lease, e.leaseAmt = 10, 7, 100
		e.lowWater.Store(20)
		return e
	}
	for _, c := range []struct {
		name                 string
		budget               int64
		contended            bool
		ask, excess, budget2 int64
	}{
		{name: "ran low", budget: 15, ask: 40, budget2: 15},
		{name: "at the level", budget: 55, ask: 1, budget2: 55},
		{name: "demand dropped", budget: 90, ask: 1, excess: 35, budget2: 55},
		{name: "excess beyond what the lease granted", budget: 500, ask: 1, excess: 100, budget2: 400},
		{name: "scarce bucket: kept", budget: 90, contended: true, ask: 1, budget2: 90},
	} {
		e := setup(c.budget)
		e.contended = c.contended
		ask, excess := lt.renewal(e, time.Now().UnixNano())
		if ask != c.ask || excess != c.excess || e.budget.Load() != c.budget2 {
			t.Errorf("%s: ask %d, excess %d, budget left %d; want %d, %d, %d", c.name, ask, excess, e.budget.Load(), c.ask, c.excess, c.budget2)
		}
		// The lease is renewed, carrying what the node keeps.
		if !e.carrying || e.kept != c.budget2 || e.lease != 7 {
			t.Errorf("%s: carrying %v, kept %d, lease %d; want true, %d, 7", c.name, e.carrying, e.kept, e.lease, c.budget2)
		}
	}
}
