package decide

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/ring"
)

// The deny cache's tests run the engine over real state machines, as the
// other engine tests do, and read the shards' calls to tell a cached
// answer from a decided one.

// perSecond refills a unit a second: a bucket denies for a second per unit
// it is short.
var perSecond = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: 10 * time.Second}

func secItem(key string, cost int64) Item {
	return Item{Name: "api", Key: key, Algorithm: fsm.TokenBucket, Limit: 10, Period: 10 * time.Second, HasPeriod: true, Cost: cost}
}

func cached(cfg *Config) { cfg.DenyCache = 16 }

func mustCheck(t *testing.T, e *Engine, items ...Item) *Answer {
	t.Helper()
	ans, err := e.Check(context.Background(), &Request{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	return ans
}

// TestDenyCacheUntilRetryAfter: an empty bucket's denial answers the next
// checks from memory, with the state machine's time they stand for and a
// wait never shorter than the bucket's; from the retry-after on the shard
// decides again, and allows.
func TestDenyCacheUntilRetryAfter(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cached(cfg); cfg.Observer = obs })
	key := ring.BucketKey("api", "hot")
	f.take(0, key, perSecond, 10)
	first := mustCheck(t, e, secItem("hot", 1))
	d0 := first.Results[0].DecidedAt
	if first.Decision != Deny || first.Results[0].Cached || f.takesOf(0, key) != 1 {
		t.Fatalf("first check: %+v, want denied by the shard", first.Results[0])
	}
	for _, at := range []time.Duration{0, 400 * time.Millisecond, 999 * time.Millisecond} {
		c.Advance(at - time.Duration(c.Now().UnixNano()-d0))
		ans := mustCheck(t, e, secItem("hot", 1))
		r := ans.Results[0]
		if ans.Decision != Deny || ans.Reason != OverLimit || !r.Cached || r.Index != 0 {
			t.Fatalf("at +%v: %+v %+v, want a cached denial", at, ans, r)
		}
		if r.DecidedAt != d0+int64(at) {
			t.Errorf("at +%v: decided at %d, want the state machine's %d", at, r.DecidedAt, d0+int64(at))
		}
		if wait := time.Second - at; r.RetryAfter < wait {
			t.Errorf("at +%v: retry after %v, shorter than the bucket's %v", at, r.RetryAfter, wait)
		}
		if exact := f.peek(0, key, perSecond); exact.Allowed {
			t.Fatalf("at +%v: the bucket would allow: %+v", at, exact)
		}
	}
	if n := f.takesOf(0, key); n != 1 {
		t.Errorf("%d takes reached the shard, want only the first", n)
	}
	c.Advance(time.Millisecond) // one second after the denial: a unit is back
	if ans := mustCheck(t, e, secItem("hot", 1)); ans.Decision != Allow || ans.Results[0].Cached {
		t.Fatalf("at the retry-after: %+v, want allowed by the shard", ans.Results[0])
	}
	if h, m, s := obs.get("denycache/hit"), obs.get("denycache/miss"), obs.get("denycache/stored"); h != 3 || m != 2 || s != 1 {
		t.Errorf("hits %d, misses %d, stored %d; want 3, 2, 1", h, m, s)
	}
	if n := obs.get("item/strict/deny/over_limit"); n != 4 {
		t.Errorf("%d strict denials counted, want 4 (cached ones too)", n)
	}
}

// TestDenyCacheCost: a bucket with 3 units left denies a cost of 5, and
// that denial answers costs of 5 and more only: a cost of 1 fits, and the
// shard allows it.
func TestDenyCacheCost(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, cached)
	key := ring.BucketKey("api", "k")
	f.take(0, key, perSecond, 7)
	if ans := mustCheck(t, e, secItem("k", 5)); ans.Decision != Deny || ans.Results[0].Cached {
		t.Fatalf("cost 5: %+v", ans.Results[0])
	}
	if ans := mustCheck(t, e, secItem("k", 1)); ans.Decision != Allow {
		t.Fatalf("cost 1: %+v, want allowed: 3 units were left", ans.Results[0])
	}
	for _, cost := range []int64{5, 7} {
		if ans := mustCheck(t, e, secItem("k", cost)); ans.Decision != Deny || !ans.Results[0].Cached {
			t.Fatalf("cost %d after: %+v, want a cached denial", cost, ans.Results[0])
		}
	}
	if n := f.takesOf(0, key); n != 2 {
		t.Errorf("%d takes reached the shard, want 2", n)
	}
}

// TestDenyCacheLimitIsPartOfTheBucket: an inline item whose limit was
// raised is decided under its new limit, by the shard (which carries the
// bucket's count into the new limit: it may deny too).
func TestDenyCacheLimitIsPartOfTheBucket(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, cached)
	f.take(0, ring.BucketKey("api", "k"), perSecond, 10)
	mustCheck(t, e, secItem("k", 1))
	raised := secItem("k", 1)
	raised.Limit = 20
	if ans := mustCheck(t, e, raised); ans.Results[0].Cached || ans.Results[0].Index == 0 {
		t.Fatalf("limit raised to 20: %+v, want decided by the shard", ans.Results[0])
	}
}

// TestDenyCacheSameBucketTwice: a request that takes one bucket twice is
// denied by the second take, which counted the first; the first is
// refunded in the entry, so that denial says nothing of the bucket and
// the next check is the shard's to decide.
func TestDenyCacheSameBucketTwice(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cached(cfg); cfg.Observer = obs })
	f.take(0, ring.BucketKey("api", "k"), perSecond, 5)
	if ans := mustCheck(t, e, secItem("k", 3), secItem("k", 3)); ans.Decision != Deny || ans.Results[0].Reason != Refunded {
		t.Fatalf("twice: %+v", ans.Results)
	}
	if ans := mustCheck(t, e, secItem("k", 3)); ans.Decision != Allow {
		t.Fatalf("once after: %+v, want allowed: 5 units are left", ans.Results[0])
	}
	if n := obs.get("denycache/dropped"); n != 1 {
		t.Errorf("%d dropped, want 1", n)
	}
}

// TestDenyCacheRefundAcrossShards: while a request's take of X on one
// shard stands, another check of X is denied and remembered; the request
// is then denied on another shard and X refunded. The refund drops X's
// entry, so X is allowed again at once, as the bucket allows it.
func TestDenyCacheRefundAcrossShards(t *testing.T) {
	c := newClock()
	f := newShards(t, 2, c)
	e := engine(f, c, cached)
	x, y := keyOn(t, f.ring, "api", 0), keyOn(t, f.ring, "api", 1)
	f.take(1, ring.BucketKey("api", y), perSecond, 10)
	var once atomic.Bool
	var during *Answer
	f.after = func(s int, _ Applied) {
		if s == 0 && once.CompareAndSwap(false, true) {
			during = mustCheck(t, e, secItem(x, 10)) // the request holds 5 of X's 10
		}
	}
	if ans := mustCheck(t, e, secItem(x, 5), secItem(y, 1)); ans.Decision != Deny || ans.Results[0].Reason != Refunded {
		t.Fatalf("the request: %+v", ans.Results)
	}
	if during == nil || during.Decision != Deny || during.Results[0].Cached {
		t.Fatalf("X while taken: %+v, want denied by the shard", during)
	}
	if ans := mustCheck(t, e, secItem(x, 10)); ans.Decision != Allow {
		t.Fatalf("X after the refund: %+v, want allowed: the refund gave its 5 back", ans.Results[0])
	}
}

// TestDenyCacheWholeRequest: a request with one remembered denial is denied
// whole without a submit: its other items untried, reported as refunded.
// A request with an idempotency key, or in a dry run, goes to the shard.
func TestDenyCacheWholeRequest(t *testing.T) {
	c := newClock()
	f := newShards(t, 2, c)
	e := engine(f, c, cached)
	x, y := keyOn(t, f.ring, "api", 0), keyOn(t, f.ring, "api", 1)
	f.take(1, ring.BucketKey("api", y), perSecond, 10)
	mustCheck(t, e, secItem(y, 1))
	before := f.submits(0) + f.submits(1)
	ans := mustCheck(t, e, secItem(x, 1), secItem(y, 1))
	if ans.Decision != Deny || ans.Reason != OverLimit {
		t.Fatalf("%+v, want denied over limit", ans)
	}
	if r := ans.Results[0]; r.Reason != Refunded || !r.Cached || r.Shard != 0 || r.Limit != 10 {
		t.Errorf("untried item: %+v", r)
	}
	if r := ans.Results[1]; r.Reason != OverLimit || !r.Cached || r.Shard != 1 {
		t.Errorf("remembered item: %+v", r)
	}
	if n := f.submits(0) + f.submits(1); n != before {
		t.Errorf("%d submits for a remembered denial, want none", n-before)
	}
	idem := secItem(y, 1)
	idem.IdempotencyKey = "retry-1"
	for _, req := range []*Request{{Items: []Item{idem}}, {Items: []Item{secItem(y, 1)}, DryRun: true}} {
		ans, err := e.Check(context.Background(), req)
		if err != nil || ans.Decision != Deny || ans.Results[0].Cached {
			t.Errorf("%+v: %+v %v, want denied by the shard", req, ans, err)
		}
	}
	if n := f.submits(1) - before; n != 2 {
		t.Errorf("%d submits to shard 1, want 2", n)
	}
}

// TestDenyCacheBound: the cache holds its size; the least recently used
// entry makes room, counted, and its bucket is the shard's to decide again.
func TestDenyCacheBound(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	obs := newObserver()
	e := engine(f, c, func(cfg *Config) { cfg.DenyCache = 2; cfg.Observer = obs })
	for _, k := range []string{"a", "b", "c"} {
		f.take(0, ring.BucketKey("api", k), perSecond, 10)
		mustCheck(t, e, secItem(k, 1))
	}
	if n := obs.get("denycache/evicted"); n != 1 {
		t.Errorf("%d evicted, want 1", n)
	}
	for _, k := range []struct {
		key    string
		cached bool
	}{{"b", true}, {"c", true}, {"a", false}} {
		if ans := mustCheck(t, e, secItem(k.key, 1)); ans.Decision != Deny || ans.Results[0].Cached != k.cached {
			t.Errorf("%s: %+v, want denied, cached %v", k.key, ans.Results[0], k.cached)
		}
	}
}

// policySet is a policy set a test replaces.
type policySet struct {
	p atomic.Pointer[policy.Snapshot]
}

func (s *policySet) Policies() (*policy.Snapshot, bool) { return s.p.Load(), true }

func (s *policySet) set(t *testing.T, doc string, version uint64) {
	t.Helper()
	ps, err := policy.Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile(ps, nil, version)
	if err != nil {
		t.Fatal(err)
	}
	s.p.Store(snap)
}

const tenantLimit = `
policies:
  - policy_id: tenant
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: %s } }]
%s`

// TestDenyCachePolicyChange: a denial holds under the policy version it
// was decided with: after a change, even one that keeps its limit, the
// shard decides; a shadow policy's bucket never answers from the cache, so a
// request with one goes to its shard.
func TestDenyCachePolicyChange(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	set := &policySet{}
	set.set(t, fmt.Sprintf(tenantLimit, "1/h", ""), 1)
	e := engine(f, c, func(cfg *Config) { cached(cfg); cfg.Policies = set })
	check := func() *Answer {
		t.Helper()
		ans, err := e.Check(context.Background(), &Request{Descriptors: &Descriptors{TenantID: "t1"}})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	cachedDeny := func(a *Answer) bool { return a.Decision == Deny && anyCached(a) }
	if a := check(); a.Decision != Allow {
		t.Fatalf("first: %+v", a)
	}
	if a, b := check(), check(); a.Decision != Deny || anyCached(a) || !cachedDeny(b) {
		t.Fatalf("second and third: %+v %+v, want denied by the shard, then from the cache", a.Results, b.Results)
	}
	set.set(t, fmt.Sprintf(tenantLimit, "1/h", ""), 2)
	if a, b := check(), check(); a.Decision != Deny || anyCached(a) || !cachedDeny(b) {
		t.Fatalf("version 2: %+v %+v, want denied by the shard, then from the cache", a.Results, b.Results)
	}
	set.set(t, fmt.Sprintf(tenantLimit, "2/h", ""), 3)
	if a := check(); anyCached(a) {
		t.Fatalf("limit raised to 2/h: %+v, want decided by the shard", a.Results)
	}
	set.set(t, fmt.Sprintf(tenantLimit, "2/h", `  - policy_id: trial
    mode: SHADOW
    key: [tenant_id]
    limits: [{ name: main, algorithm: TOKEN_BUCKET, config: { limit: 5/h } }]
`), 4)
	for range 2 {
		if a := check(); a.Decision != Deny || anyCached(a) {
			t.Fatalf("with a shadow policy: %+v, want denied by the shard", a.Results)
		}
	}
}

func anyCached(a *Answer) bool {
	for _, r := range a.Results {
		if r.Cached {
			return true
		}
	}
	return false
}

// TestDenyCacheAllowSinceDrops: a bucket that gained room the node could
// not see (another node's refund) and then allowed a take of at least the
// denied cost, to a check the cache did not answer (it carried an
// idempotency key), drops the remembered denial.
func TestDenyCacheAllowSinceDrops(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, cached)
	key := ring.BucketKey("api", "k")
	f.take(0, key, perSecond, 10)
	mustCheck(t, e, secItem("k", 5))
	f.mu.Lock()
	f.machine(0).Apply(&fsm.Command{Now: c.Now().UnixNano(), Ops: []fsm.Op{{Kind: fsm.OpRefund, Key: key, Limit: perSecond, Cost: 10}}}, nil)
	f.mu.Unlock()
	c.Advance(time.Millisecond)
	idem := secItem("k", 5)
	idem.IdempotencyKey = "r1"
	if ans := mustCheck(t, e, idem); ans.Decision != Allow {
		t.Fatalf("after the refund: %+v, want allowed", ans.Results[0])
	}
	if ans := mustCheck(t, e, secItem("k", 5)); ans.Decision != Allow {
		t.Fatalf("the next: %+v, want allowed: 5 units are left", ans.Results[0])
	}
}

// TestDenyCacheAllowBeforeDenialKeeps: answers can come back out of order.
// A take allowed in the same entry as a later denial (same state machine
// time), whose answer arrives after the denial's, says nothing against
// it: the denial stays remembered.
func TestDenyCacheAllowBeforeDenialKeeps(t *testing.T) {
	c := newClock()
	f := newShards(t, 1, c)
	e := engine(f, c, cached)
	f.take(0, ring.BucketKey("api", "k"), perSecond, 9)
	var once atomic.Bool
	var during *Answer
	f.after = func(int, Applied) {
		if once.CompareAndSwap(false, true) {
			during = mustCheck(t, e, secItem("k", 1))
		}
	}
	if ans := mustCheck(t, e, secItem("k", 1)); ans.Decision != Allow {
		t.Fatalf("the last unit: %+v", ans.Results[0])
	}
	if during == nil || during.Decision != Deny {
		t.Fatalf("the check after it: %+v, want denied", during)
	}
	if ans := mustCheck(t, e, secItem("k", 1)); ans.Decision != Deny || !ans.Results[0].Cached {
		t.Fatalf("the next: %+v, want a cached denial", ans.Results[0])
	}
}
