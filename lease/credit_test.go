package lease

import (
	"math"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/keyhash"
)

// grantedCredit asks a real state machine, in which the bucket existing
// exists, for a credit, as a shard would.
func grantedCredit(t *testing.T, existing string, l fsm.Limit, deadline int64) *credit {
	t.Helper()
	m := fsm.New(fsm.Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	rs := m.Apply(&fsm.Command{Now: now, Ops: []fsm.Op{
		{Kind: fsm.OpTake, Key: existing, Limit: l, Cost: 1},
		{Kind: fsm.OpCredit, Key: "api", Holder: "n1", TTL: time.Minute},
	}}, nil)
	if !rs[1].Allowed || rs[1].Filter.Empty() {
		t.Fatalf("credit not granted: %+v", rs[1])
	}
	return &credit{deadline: deadline, own: rs[1].Filter}
}

func TestCreditSpend(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1000, Period: time.Second}
	a := fsm.CreditAllowance(l)
	if a != fsm.MaxCreditUnits {
		t.Fatalf("allowance %d, want %d for a fast limit", a, fsm.MaxCreditUnits)
	}
	lt := bareTable()
	c := newCredits(lt, 20*time.Second, false)
	lt.credits = c
	sl := c.slot(creditKey{3, "api"})
	at := t0.UnixNano()

	fresh := lt.put("api\x00fresh", 0, time.Time{})
	fresh.limit = l
	fresh.shard.Store(3)
	// No credit yet: not spent (and no request either, while refused).
	sl.refused.Store(t0.Add(time.Hour).UnixNano())
	if _, ok := c.spend(fresh, 1, at); ok {
		t.Fatal("spent without a credit")
	}

	sl.cur.Store(grantedCredit(t, "api\x00old", l, t0.Add(time.Second).UnixNano()))
	// A credit covers one limit name: another limit's key has no credit.
	bill := lt.put("billing\x00x", 0, time.Time{})
	bill.limit = l
	bill.shard.Store(3)
	c.slot(creditKey{3, "billing"}).refused.Store(t0.Add(time.Hour).UnixNano())
	if _, ok := c.spend(bill, 1, at); ok {
		t.Fatal("spent the api credit on another limit's key")
	}
	old := lt.put("api\x00old", 0, time.Time{})
	old.limit = l
	old.shard.Store(3)
	if _, ok := c.spend(old, 1, at); ok {
		t.Fatal("spent a credit on a bucket that existed at the grant")
	}
	// A credit granted after a split's fence covers the range the shard
	// kept: a key of the range that left is the new shard's, even while
	// this node still routes it here.
	fenced := grantedCredit(t, "api\x00old", l, t0.Add(time.Second).UnixNano())
	h := keyhash.Sum("api\x00fresh")
	fenced.rng = fsm.Range{Lo: h + 1, Hi: math.MaxUint64}
	if h == math.MaxUint64 {
		fenced.rng = fsm.Range{Lo: 0, Hi: h - 1}
	}
	sl.cur.Store(fenced)
	if _, ok := c.spend(fresh, 1, at); ok {
		t.Fatal("spent a credit on a key outside the range the shard owned at the grant")
	}
	sl.cur.Store(grantedCredit(t, "api\x00old", l, t0.Add(time.Second).UnixNano()))
	for i := range a {
		got, ok := c.spend(fresh, 1, at)
		if !ok || got.left != a-i-1 {
			t.Fatalf("use %d: spend = %+v, %t; want %d left", i+1, got, ok, a-i-1)
		}
		if wantSignal := i+1 >= a-creditCushion; (len(lt.wake) == 1) != wantSignal {
			t.Fatalf("use %d of %d: %d lease requests queued, want one from use %d on", i+1, a, len(lt.wake), a-creditCushion)
		}
	}
	if _, ok := c.spend(fresh, 1, at); ok {
		t.Fatal("spent beyond the allowance")
	}
	// A refund (the request was denied as a whole) gives units back to the
	// credit they came from, not to a newer one.
	cur := sl.cur.Load()
	fresh.refundCredit(creditSpend{cr: cur}, 2)
	if got, ok := c.spend(fresh, 2, at); !ok || got.left != 0 {
		t.Fatalf("after refund: %+v, %t", got, ok)
	}
	// A new credit brings a new allowance; a refund to the old one does
	// not add to it.
	next := grantedCredit(t, "api\x00old", l, t0.Add(time.Second).UnixNano())
	sl.cur.Store(next)
	fresh.refundCredit(creditSpend{cr: cur}, 5)
	if got, ok := c.spend(fresh, a, at); !ok || got.left != 0 {
		t.Fatalf("first spend under a new credit: %+v, %t", got, ok)
	}
	if _, ok := c.spend(fresh, 1, at); ok {
		t.Fatal("a refund to the old credit added to the new credit's allowance")
	}
	// A check that loaded the old credit before the renewal spends from the
	// old credit's own record, never resetting the new one's.
	if _, ok := cur.take(fresh.hash, 5, a); !ok {
		t.Fatal("the old credit's record lost its refund")
	}
	if _, ok := cur.take(fresh.hash, 1, a); ok {
		t.Fatal("the old credit allowed more than its allowance")
	}
	if _, ok := c.spend(fresh, 1, at); ok {
		t.Fatal("spending the old credit reset the new one's record")
	}
	// At its deadline a credit is void.
	other := lt.put("api\x00other", 0, time.Time{})
	other.limit = l
	other.shard.Store(3)
	if _, ok := c.spend(other, 1, t0.Add(time.Second).UnixNano()); ok {
		t.Fatal("spent a credit at its deadline")
	}
	// Algorithms that cannot be credited, and disabled credits, never are.
	other.limit = fsm.Limit{Algorithm: fsm.FixedWindow, Limit: 1000, Period: time.Second}
	if _, ok := c.spend(other, 1, at); ok {
		t.Fatal("spent a credit on a fixed window")
	}
	other.limit = l
	off := newCredits(lt, 20*time.Second, true)
	off.slot(creditKey{3, "api"}).cur.Store(next)
	if _, ok := off.spend(other, 1, at); ok {
		t.Fatal("spent a credit with credits disabled")
	}
	if _, ok := c.spend(other, 1, at); !ok {
		t.Fatal("a fresh key could not spend the live credit")
	}
}

// TestCreditOutlivesEntry: what a node spent from a credit on a key is kept
// with the credit, so dropping the key's idle entry (after a lease TTL, far
// shorter than a credit's life) does not give the allowance back.
func TestCreditOutlivesEntry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 16, Period: time.Second, Burst: 128}
	a := fsm.CreditAllowance(l)
	lt := bareTable()
	lt.cfg = Config{TTL: 5 * time.Second, RenewInterval: 500 * time.Millisecond}
	c := newCredits(lt, 20*time.Second, false)
	lt.credits = c
	c.slot(creditKey{3, "api"}).cur.Store(grantedCredit(t, "api\x00other", l, t0.Add(18*time.Second).UnixNano()))
	key := "api\x00k"

	if _, ok := c.spend(lt.entryFor(key, keyhash.Sum(key), l, 3), a, t0.UnixNano()); !ok {
		t.Fatal("first use not decided from the credit")
	}
	// Idle renewal rounds drop the entry.
	now := t0
	for range 12 {
		now = now.Add(lt.cfg.RenewInterval)
		var idle []*entry
		for i := range lt.shards {
			for _, e := range lt.shards[i].m {
				if lt.tick(e, now) {
					idle = append(idle, e)
				}
			}
		}
		lt.giveBack(idle, true)
	}
	if lt.lookup(key, keyhash.Sum(key)) != nil {
		t.Fatal("the idle entry was not dropped; the test needs it dropped")
	}
	if _, ok := c.spend(lt.entryFor(key, keyhash.Sum(key), l, 3), 1, now.UnixNano()); ok {
		t.Fatal("the key's allowance was spent again after its entry was dropped")
	}
}

// BenchmarkCreditSpend is the first use of a key on a node: its entry
// exists (Spend creates it), and the check is decided from the shard's
// credit. Every iteration is a key the credit has not seen.
func BenchmarkCreditSpend(b *testing.B) {
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1000, Period: time.Second}
	lt := bareTable()
	c := newCredits(lt, 20*time.Second, false)
	lt.credits = c
	now := time.Now()
	m := fsm.New(fsm.Config{})
	r := m.Apply(&fsm.Command{Now: now.UnixNano(), Ops: []fsm.Op{{Kind: fsm.OpCredit, Key: "api", Holder: "n1", TTL: time.Minute}}}, nil)[0]
	c.slot(creditKey{0, "api"}).cur.Store(&credit{deadline: now.Add(time.Hour).UnixNano(), own: r.Filter})
	entries := make([]*entry, 1<<16)
	for i := range entries {
		key := "api\x00" + string(rune('a'+i%26)) + time.Duration(i).String()
		entries[i] = &entry{key: key, hash: keyhash.Sum(key), limit: l}
	}
	at := now.UnixNano()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i > 0 && i%len(entries) == 0 { // a new credit: every key is new to it again
			c.slot(creditKey{0, "api"}).cur.Store(&credit{deadline: now.Add(time.Hour).UnixNano(), own: r.Filter})
		}
		e := entries[i%len(entries)]
		if _, ok := c.spend(e, 1, at); !ok {
			b.Fatal("not decided from the credit")
		}
	}
}

// filterOf is the filter of a credit granted by a real state machine in
// which the buckets of keys exist.
func filterOf(t *testing.T, keys ...string) fsm.Filter {
	t.Helper()
	m := fsm.New(fsm.Config{})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1000, Period: time.Second}
	var ops []fsm.Op
	for _, k := range keys {
		ops = append(ops, fsm.Op{Kind: fsm.OpTake, Key: k, Limit: l, Cost: 1})
	}
	ops = append(ops, fsm.Op{Kind: fsm.OpCredit, Key: "api", Holder: "n1", TTL: time.Minute})
	rs := m.Apply(&fsm.Command{Now: now, Ops: ops}, nil)
	if r := rs[len(rs)-1]; !r.Allowed || r.Filter.Empty() {
		t.Fatalf("credit not granted: %+v", r)
	}
	return rs[len(rs)-1].Filter
}

// A shard's credits share one filter, the newest: an older grant's filter
// never replaces it (a credit must read a filter from its grant or later),
// two of one log entry are combined, and each shard has its own.
func TestCreditFilterPerShard(t *testing.T) {
	c := newCredits(nil, time.Minute, false)
	fa, fb, fc := filterOf(t, "a"), filterOf(t, "b"), filterOf(t, "c")
	has := func(cell interface{ Load() *shardFilter }, key string) bool {
		return cell.Load().f.MayContain(keyhash.Sum(key))
	}

	cell := c.install(filterKey{shard: 0}, 10, fa)
	if cell == nil || !has(cell, "a") {
		t.Fatal("first filter not installed")
	}
	if c.install(filterKey{shard: 0}, 5, fb) != cell || has(cell, "b") || !has(cell, "a") {
		t.Error("an older grant's filter replaced the newer one")
	}
	if c.install(filterKey{shard: 0}, 10, fb); !has(cell, "a") || !has(cell, "b") {
		t.Error("two filters of one log entry were not combined")
	}
	if c.install(filterKey{shard: 0}, 12, fc); !has(cell, "c") || cell.Load().index != 12 {
		t.Error("a newer grant's filter was not installed")
	}
	if other := c.install(filterKey{shard: 1}, 3, fa); other == cell || !has(cell, "c") {
		t.Error("shards share a filter")
	}
	// After a split's fence the shard owns a smaller range: its newer
	// filters (which no longer hold the buckets that left) must not serve
	// the credits granted before.
	split := filterKey{shard: 0, rng: fsm.Range{Lo: 0, Hi: 1 << 40}}
	if after := c.install(split, 20, fa); after == cell || !has(cell, "c") || cell.Load().index != 12 {
		t.Error("a filter granted after a split serves the credits granted before it")
	}
	cr := &credit{shared: cell}
	if !cr.existed(keyhash.Sum("c")) {
		t.Error("a credit does not read its shard's filter")
	}
}

// A key's allowance under a credit is fixed at its first use and only
// lowered after: the shard charged the allowance of the limit it saw, so a
// raised limit must not let the node spend more, and a lowered one must
// stop it sooner.
func TestCreditAllowanceNeverRaised(t *testing.T) {
	cr := &credit{}
	if left, ok := cr.take(7, 4, 6); !ok || left != 2 {
		t.Fatalf("first take: %d, %v; want 2 left", left, ok)
	}
	if _, ok := cr.take(7, 3, 100); ok {
		t.Error("a raised limit let the key spend past the allowance of its first use")
	}
	if _, ok := cr.take(7, 1, 4); ok {
		t.Error("a lowered limit (4, 4 spent) still let the key spend")
	}
	if left, ok := cr.take(7, 2, 6); ok || left != 0 {
		t.Errorf("after the allowance was lowered to 4, a take of 2 gave %d, %v", left, ok)
	}
}
