package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The tests in this file drive LEASED checks against real three-node
// clusters and account for every answer the clients saw. A token bucket of
// capacity C refilling limit L per period P allows at most C + L·T/P over any
// run of duration T; the limit "allows" that much, and the tests compare the
// ALLOW answers clients received with it, in both directions: never more
// (safety), and not much less when demand exceeds the limit (utilization).

// leasedItem is a token bucket of limit per period with capacity burst (0:
// the limit) that fails closed, so every ALLOW is a real admission.
func leasedItem(key string, limit int64, period time.Duration, burst int64) *pb.Item {
	it := clustertest.Item("api", key, limit, period)
	it.Burst = burst
	return it
}

func leasedCheck(c *clustertest.Cluster, node int, it *pb.Item) (*pb.CheckResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return c.Client(node).Check(ctx, &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: []*pb.Item{it}})
}

// answer is one check as its client saw it.
type answer struct {
	client     int
	node       int
	sent, recv time.Time
	allow      bool
	reason     pb.Reason
	strict     bool // decided by the shard (carries a log index), not from a lease
	err        error
}

// traffic runs paced clients sending leased checks for one item and records
// every answer.
type traffic struct {
	t    *testing.T
	c    *clustertest.Cluster
	item *pb.Item

	wg      sync.WaitGroup
	mu      sync.Mutex
	clients int
	answers []answer // guarded by mu
}

func newTraffic(t *testing.T, c *clustertest.Cluster, item *pb.Item) *traffic {
	return &traffic{t: t, c: c, item: item}
}

// start starts n clients on node, each sending one check every interval
// (open loop while checks are faster than that; a slow check delays only its
// own client), and returns a function that stops them.
func (tr *traffic) start(node, n int, every time.Duration) (stop func()) {
	done := make(chan struct{})
	for i := range n {
		tr.mu.Lock()
		id := tr.clients
		tr.clients++
		tr.mu.Unlock()
		tr.wg.Go(func() {
			// Stagger the clients so their ticks spread over the interval.
			select {
			case <-time.After(every * time.Duration(i) / time.Duration(n)):
			case <-done:
				return
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				sent := time.Now()
				resp, err := leasedCheck(tr.c, node, tr.item)
				a := answer{client: id, node: node, sent: sent, recv: time.Now(), err: err}
				if err == nil {
					r := resp.GetResults()[0]
					a.allow = resp.GetDecision() == pb.Decision_DECISION_ALLOW
					a.reason = r.GetReason()
					a.strict = r.GetIndex() != 0
				}
				tr.mu.Lock()
				tr.answers = append(tr.answers, a)
				tr.mu.Unlock()
				select {
				case <-done:
					return
				case <-tick.C:
				}
			}
		})
	}
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// wait waits for every client to finish and returns the answers, ordered by
// the time they were received.
func (tr *traffic) wait() []answer {
	tr.wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := slices.Clone(tr.answers)
	slices.SortFunc(out, func(a, b answer) int { return a.recv.Compare(b.recv) })
	return out
}

// tally counts answers by outcome.
type tally struct {
	allow, overLimit, unavailable, failOpen, other, errs, strict, total int
}

func count(ans []answer) tally {
	var t tally
	for _, a := range ans {
		t.total++
		switch {
		case a.err != nil:
			t.errs++
			continue
		case a.allow && a.reason == pb.Reason_REASON_FAIL_OPEN:
			t.failOpen++
		case a.allow:
			t.allow++
		case a.reason == pb.Reason_REASON_OVER_LIMIT:
			t.overLimit++
		case a.reason == pb.Reason_REASON_UNAVAILABLE:
			t.unavailable++
		default:
			t.other++
		}
		if a.strict {
			t.strict++
		}
	}
	return t
}

// allowsIn counts ALLOW answers received in [from, to) from the given nodes
// (all nodes when none are given).
func allowsIn(ans []answer, from, to time.Time, nodes ...int) int64 {
	var n int64
	for _, a := range ans {
		if a.err == nil && a.allow && !a.recv.Before(from) && a.recv.Before(to) && (len(nodes) == 0 || slices.Contains(nodes, a.node)) {
			n++
		}
	}
	return n
}

// bucket is a token bucket's parameters, for computing what it allows.
type bucket struct {
	capacity, limit int64
	period          time.Duration
}

// allows is the most a strict token bucket admits over a run of d that
// starts with the bucket full.
func (b bucket) allows(d time.Duration) float64 {
	return float64(b.capacity) + float64(b.limit)*d.Seconds()/b.period.Seconds()
}

// refill is what the bucket refills over d.
func (b bucket) refill(d time.Duration) float64 {
	return float64(b.limit) * d.Seconds() / b.period.Seconds()
}

// firstSent is the send time of the earliest check.
func firstSent(ans []answer) time.Time {
	t0 := ans[0].sent
	for _, a := range ans {
		if a.sent.Before(t0) {
			t0 = a.sent
		}
	}
	return t0
}

// worstPrefix checks the limit at every instant: for each ALLOW (in receive
// order), the ALLOWs received so far against what the bucket allows from t0
// to that receive time. It returns the largest excess (negative: the
// smallest margin) and where it happened.
func worstPrefix(ans []answer, b bucket, t0 time.Time) (excess float64, at time.Duration, allowed int64) {
	excess = -1e18
	for _, a := range ans {
		if a.err != nil || !a.allow {
			continue
		}
		allowed++
		if e := float64(allowed) - b.allows(a.recv.Sub(t0)); e > excess {
			excess, at = e, a.recv.Sub(t0)
		}
	}
	return excess, at, allowed
}

// leftover bounds the budget still admissible at t that is not refill after
// t: what the bucket allowed from t0 to t, less what clients were admitted
// before t (it includes budget granted to leases and not spent yet).
func leftover(ans []answer, b bucket, t0, t time.Time) float64 {
	return max(0, b.allows(t.Sub(t0))-float64(allowsIn(ans, t0, t)))
}

// replay decides the answered checks again, in the order they were sent,
// with a strict token bucket that is full at t0: what the limit would have
// admitted of the same demand. It returns, per answer, whether the strict
// bucket allows it (false for checks that got no answer).
func (b bucket) replay(ans []answer, t0 time.Time) []bool {
	idx := make([]int, len(ans))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int { return ans[i].sent.Compare(ans[j].sent) })
	ok := make([]bool, len(ans))
	tokens, last := float64(b.capacity), t0
	for _, i := range idx {
		if ans[i].err != nil {
			continue
		}
		tokens = min(float64(b.capacity), tokens+b.refill(ans[i].sent.Sub(last)))
		last = ans[i].sent
		if tokens >= 1 {
			tokens--
			ok[i] = true
		}
	}
	return ok
}

// longestGap is the longest time any client went without an ALLOW within
// [from, to), counting from from and up to to, and where that gap began.
func longestGap(ans []answer, from, to time.Time) (gap time.Duration, at time.Time) {
	last := map[int]time.Time{}
	for _, a := range ans {
		if _, ok := last[a.client]; !ok {
			last[a.client] = from
		}
		if a.err != nil || !a.allow || a.recv.Before(from) || !a.recv.Before(to) {
			continue
		}
		if d := a.recv.Sub(last[a.client]); d > gap {
			gap, at = d, last[a.client]
		}
		last[a.client] = a.recv
	}
	for _, l := range last {
		if d := to.Sub(l); d > gap {
			gap, at = d, l
		}
	}
	return gap, at
}

func filter(ans []answer, keep func(answer) bool) []answer {
	var out []answer
	for _, a := range ans {
		if keep(a) {
			out = append(out, a)
		}
	}
	return out
}

func pct(a, b float64) float64 { return 100 * a / b }

// keyShard sends one strict check for item to learn its shard (it consumes
// one unit, counted by the caller).
func keyShard(t *testing.T, c *clustertest.Cluster, item *pb.Item) int {
	t.Helper()
	resp, err := check(t, c, 0, item)
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.GetResults()[0].GetShard())
}

// preferredLeader waits until shard s is led by its preferred replica, the
// first in placement order, to which the cluster moves leadership back
// within seconds of starting; leadership then stays put unless a test
// moves it. It returns that node's index.
func preferredLeader(t *testing.T, c *clustertest.Cluster, s int) int {
	t.Helper()
	leader := -1
	await.True(t, 30*time.Second, fmt.Sprintf("shard %d to settle on its preferred leader", s), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := c.Client(0).Status(ctx)
		cancel()
		for _, sh := range st.GetShards() {
			if err != nil || int(sh.GetId()) != s || len(sh.GetReplicas()) == 0 || sh.GetLeaderId() != sh.GetReplicas()[0] {
				continue
			}
			for i, nd := range c.Nodes {
				if nd.ID == sh.GetLeaderId() && c.ShardLeader(i, s) == i {
					leader = i
					return true
				}
			}
		}
		return false
	})
	return leader
}

// TestLeaseNeverOverLimit: three nodes spend one token bucket (200 per 2s)
// through leases, with demand twice the limit split 70/20/10 across the
// nodes, for four periods. At no instant do the ALLOWs the clients received
// exceed what a strict token bucket allows from the first request on.
func TestLeaseNeverOverLimit(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	b := bucket{capacity: 200, limit: 200, period: 2 * time.Second}
	item := leasedItem("user:never-over", b.limit, b.period, 0)
	tr := newTraffic(t, c, item)
	// 2× the limit (200/s in total) from 10 clients at 20/s: 7 on n1, 2 on
	// n2, 1 on n3.
	const every = 50 * time.Millisecond
	stops := []func(){tr.start(0, 7, every), tr.start(1, 2, every), tr.start(2, 1, every)}
	time.Sleep(8 * time.Second) // four periods of traffic: the interval measured
	for _, stop := range stops {
		stop()
	}
	ans := tr.wait()

	t0, end := firstSent(ans), ans[len(ans)-1].recv
	elapsed := end.Sub(t0)
	bound := b.allows(elapsed)
	k := count(ans)
	excess, at, allowed := worstPrefix(ans, b, t0)
	demand := float64(k.total) / elapsed.Seconds()
	t.Logf("%d checks in %s (%.0f/s, %.2f× the limit's %.0f/s): %d ALLOW, %d OVER_LIMIT, %d UNAVAILABLE, %d other, %d RPC errors; %d decided strictly",
		k.total, elapsed.Round(time.Millisecond), demand, demand/b.refill(time.Second), b.refill(time.Second),
		k.allow, k.overLimit, k.unavailable, k.other+k.failOpen, k.errs, k.strict)
	t.Logf("admitted %d, a strict token bucket allows %.1f over %s (%.1f%%); worst instant: %+.1f against the bound at +%s",
		allowed, bound, elapsed.Round(time.Millisecond), pct(float64(allowed), bound), excess, at.Round(time.Millisecond))
	for i := range 3 {
		nk := count(filter(ans, func(a answer) bool { return a.node == i }))
		t.Logf("  %s: %d checks, %d ALLOW (%.0f%%)", c.Nodes[i].ID, nk.total, nk.allow, pct(float64(nk.allow), float64(nk.total)))
	}
	if k.errs > 0 || k.other+k.failOpen > 0 {
		t.Errorf("%d RPC errors and %d unexpected answers, want none", k.errs, k.other+k.failOpen)
	}
	if demand < 1.5*b.refill(time.Second) {
		t.Errorf("demand was only %.0f/s; the test needs at least 1.5× the limit", demand)
	}
	if excess > 0 {
		t.Fatalf("over the limit: %d ALLOWs by +%s, %.1f more than a token bucket of %d per %s (capacity %d) allows",
			int64(excess+b.allows(at)), at.Round(time.Millisecond), excess, b.limit, b.period, b.capacity)
	}
	// Sanity: the leases did admit (most of) what the limit allows.
	if float64(allowed) < 0.8*bound {
		t.Errorf("admitted only %d of %.0f allowed", allowed, bound)
	}
}

// TestLeaseUtilization: with demand 30% above the limit, the cluster admits
// at least 90% of what the limit allows over a measured window after one
// period of warm-up. Not more: a bucket does not refill the budget its live
// leases and credits hold, so what they hold unspent when the window opens
// is not admitted in it. Then all of n1's demand (70%) moves to n3 at once; the
// under-admission that follows is reported.
func TestLeaseUtilization(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	b := bucket{capacity: 200, limit: 200, period: time.Second}
	item := leasedItem("user:utilization", b.limit, b.period, 0)
	tr := newTraffic(t, c, item)
	// 1.5× the limit (300/s) from 10 clients at 30/s: 7 on n1, 2 on n2, 1
	// on n3.
	// (1.5×, not 1.2×, so that a loaded machine that paces slower still
	// offers the 1.2× the test needs.)
	every := time.Duration(float64(10*b.period) / (1.5 * float64(b.limit)))
	stopN1 := tr.start(0, 7, every)
	stopN2 := tr.start(1, 2, every)
	stopN3 := tr.start(2, 1, every)
	const (
		warm   = time.Second // one period
		window = 6 * time.Second
		after  = 3 * time.Second
	)
	time.Sleep(warm + window) // the windows measured
	shift := time.Now()
	stopN1()
	stopN3b := tr.start(2, 7, every)
	time.Sleep(after) // likewise
	stopN2()
	stopN3()
	stopN3b()
	ans := tr.wait()

	t0 := firstSent(ans)
	w0, w1 := t0.Add(warm), t0.Add(warm+window)
	if w1.After(shift) {
		w1 = shift
	}
	k := count(filter(ans, func(a answer) bool { return !a.recv.Before(w0) && a.recv.Before(w1) }))
	admitted := allowsIn(ans, w0, w1)
	refill := b.refill(w1.Sub(w0))
	carry := leftover(ans, b, t0, w0)
	allowed := carry + refill
	demand := float64(k.total) / w1.Sub(w0).Seconds()
	t.Logf("window %s after %s of warm-up: %d checks (%.0f/s, %.2f× the limit), %d ALLOW, %d OVER_LIMIT, %d UNAVAILABLE, %d RPC errors; %d decided strictly",
		w1.Sub(w0).Round(time.Millisecond), warm, k.total, demand, demand/b.refill(time.Second), k.allow, k.overLimit, k.unavailable, k.errs, k.strict)
	t.Logf("admitted %d of %.1f the limit allows in the window (%.1f%%): %.1f refill + at most %.1f left from before the window; %.1f%% of the refill alone",
		admitted, allowed, pct(float64(admitted), allowed), refill, carry, pct(float64(admitted), refill))
	// Cross-check: a strict token bucket fed the same checks in the order
	// they were sent (counted by send time, both sides).
	ref := b.replay(ans, t0)
	var refWin, admSent int64
	for i, a := range ans {
		if !a.sent.Before(w0) && a.sent.Before(w1) {
			if ref[i] {
				refWin++
			}
			if a.err == nil && a.allow {
				admSent++
			}
		}
	}
	t.Logf("same window by send time: the cluster admitted %d, a strict token bucket admits %d of the same checks (%.1f%%)",
		admSent, refWin, pct(float64(admSent), float64(refWin)))
	if float64(admitted) > allowed+0.5 {
		t.Errorf("admitted %d in the window, more than the %.1f the limit allows", admitted, allowed)
	}
	if demand < 1.2*b.refill(time.Second) {
		t.Errorf("demand was only %.0f/s; the test needs at least 1.2× the limit", demand)
	}
	if float64(admitted) < 0.90*allowed {
		t.Errorf("under-admission: admitted %d of %.1f allowed (%.1f%%), want at least 90%%", admitted, allowed, pct(float64(admitted), allowed))
	}

	// The shift: n1's 70% moves to n3 at once. Compare what the cluster
	// admitted after it with what the limit allowed, per half period.
	end := ans[len(ans)-1].recv
	for from := shift; !from.Add(b.period / 2).After(end); from = from.Add(b.period / 2) {
		to := from.Add(b.period / 2)
		adm := allowsIn(ans, from, to)
		may := leftover(ans, b, t0, from) + b.refill(to.Sub(from))
		t.Logf("  shift +%-5s admitted %3d of %6.1f allowed (%5.1f%%); n3 admitted %d",
			from.Sub(shift).Round(time.Millisecond), adm, may, pct(float64(adm), may), allowsIn(ans, from, to, 2))
	}
	admAfter := allowsIn(ans, shift, end)
	allowedAfter := leftover(ans, b, t0, shift) + b.refill(end.Sub(shift))
	t.Logf("after the shift to n3: admitted %d of %.1f allowed over %s (%.1f%%), under-admission %.1f units (%.0f ms of the limit)",
		admAfter, allowedAfter, end.Sub(shift).Round(time.Millisecond), pct(float64(admAfter), allowedAfter),
		allowedAfter-float64(admAfter), 1000*(allowedAfter-float64(admAfter))/b.refill(time.Second))
	if admAfter == 0 || float64(admAfter) > allowedAfter+0.5 {
		t.Errorf("after the shift: admitted %d, limit allows %.1f", admAfter, allowedAfter)
	}
}

// TestLeaseKillHolder: kill -9 a node that holds leases on a bucket (200
// per second). Before the kill demand matches the limit, 70% of it on the
// victim, so the victim holds budget; the kill comes when it holds at least
// a fifth of the capacity, and its clients move to the two survivors, whose
// demand becomes 1.5× the limit. The survivors keep admitting, the total
// never exceeds the limit, the budget stranded with the dead node costs no
// more under-admission than lease.go's bound (what it held, plus at most
// one fair share in flight, for at most the lease TTL), and from a TTL after
// the kill on the survivors admit at least 90% of the limit again.
func TestLeaseKillHolder(t *testing.T) {
	const ttl = 5 * time.Second // the agents' default --lease-ttl, made explicit
	c := clustertest.Start(t, 3, clustertest.Options{ExtraArgs: []string{"--lease-ttl", ttl.String()}})
	b := bucket{capacity: 200, limit: 200, period: time.Second}
	item := leasedItem("user:kill-holder", b.limit, b.period, 0)
	s := keyShard(t, c, item) // one strict unit, before the traffic starts
	leader := preferredLeader(t, c, s)
	// Kill a node that holds leases but does not lead the key's shard: the
	// shard keeps deciding, and only the victim's leases are lost.
	victim := (leader + 1) % 3
	survivors := []int{leader, (leader + 2) % 3}

	tr := newTraffic(t, c, item)
	every := time.Duration(float64(b.period) / (0.15 * float64(b.limit))) // one client: 0.15× the limit
	stopVictim := tr.start(victim, 4, time.Duration(float64(4*b.period)/(0.7*float64(b.limit))))
	var stops []func()
	for _, i := range survivors {
		stops = append(stops, tr.start(i, 1, every))
	}
	time.Sleep(3 * time.Second) // the traffic before the kill, part of the history judged
	// Kill when the victim holds a fifth of the capacity or more (its
	// grants are at most a third: a fair share of three holders), or a
	// second later at the latest.
	var held float64
	_ = await.Wait(time.Second, func() error {
		if held = c.Metric(victim, "quorate_lease_budget_held"); held < float64(b.capacity)/5 {
			return errors.New("holds less than a fifth")
		}
		return nil
	})
	kill := time.Now()
	c.Kill(victim)
	stopVictim()
	for _, i := range survivors {
		stops = append(stops, tr.start(i, 4, every)) // the victim's clients fail over
	}
	time.Sleep(ttl + 4*time.Second) // until the dead node's leases expire, and after: the interval judged
	for _, stop := range stops {
		stop()
	}
	ans := tr.wait()

	t0 := firstSent(ans)
	end := ans[len(ans)-1].recv
	k := count(ans)
	excess, at, allowed := worstPrefix(ans, b, t0)
	t.Logf("%s killed at +%s holding %.0f units (shard %d led by %s); %d checks: %d ALLOW, %d OVER_LIMIT, %d UNAVAILABLE, %d other, %d RPC errors (all the victim's: %d), %d decided strictly",
		c.Nodes[victim].ID, kill.Sub(t0).Round(time.Millisecond), held, s, c.Nodes[leader].ID, k.total, k.allow, k.overLimit, k.unavailable,
		k.other+k.failOpen, k.errs, count(filter(ans, func(a answer) bool { return a.node == victim })).errs, k.strict)
	t.Logf("admitted %d over %s, a strict token bucket allows at most %.1f; worst instant %+.1f against the bound at +%s",
		allowed, end.Sub(t0).Round(time.Millisecond), b.allows(end.Sub(t0)), excess, at.Round(time.Millisecond))
	if excess > 0 {
		t.Errorf("over the limit by %.1f at +%s", excess, at.Round(time.Millisecond))
	}
	if sk := count(filter(ans, func(a answer) bool { return a.node != victim })); sk.errs+sk.other+sk.failOpen+sk.unavailable > 0 {
		t.Errorf("survivors answered %d RPC errors, %d UNAVAILABLE and %d other; want none", sk.errs, sk.unavailable, sk.other+sk.failOpen)
	}

	// The survivors keep admitting: no long gap between their ALLOWs.
	var gap time.Duration
	last := kill
	for _, a := range ans {
		if a.node != victim && a.err == nil && a.allow && a.recv.After(kill) {
			gap = max(gap, a.recv.Sub(last))
			last = a.recv
		}
	}
	gap = max(gap, end.Sub(last))

	// Under-admission: what a strict bucket admits of the same checks, less
	// what the cluster admitted, counted by send time.
	ref := b.replay(ans, t0)
	in := func(from, to time.Time) (admitted, strict int64) {
		for i, a := range ans {
			if a.sent.Before(from) || !a.sent.Before(to) {
				continue
			}
			if a.err == nil && a.allow {
				admitted++
			}
			if ref[i] {
				strict++
			}
		}
		return admitted, strict
	}
	adm0, ref0 := in(t0, kill)
	t.Logf("before the kill (%s at %.2f× the limit): admitted %d, a strict bucket admits %d of the same checks",
		kill.Sub(t0).Round(time.Millisecond), float64(count(filter(ans, func(a answer) bool { return a.sent.Before(kill) })).total)/kill.Sub(t0).Seconds()/b.refill(time.Second), adm0, ref0)

	w1 := kill.Add(ttl)
	adm1, ref1 := in(kill, w1)
	under := float64(ref1 - adm1)
	share := float64(b.capacity) / 3 // a grant in flight at the kill is at most a fair share
	slack := 0.05 * float64(ref1)    // the cluster's own utilization without a kill
	// The shard holds the dead node's lease back from the bucket as the
	// node last declared it (at its last renewal) until it expires: it
	// cannot know what was spent since, and treating those units as free
	// is what let leased checks over-admit (issue 13, finding 5). So the
	// stranded budget is what the node held plus its demand over one
	// renewal interval (the agents' default 500ms; the victim's clients
	// send 0.7× the limit).
	sinceReport := 0.7 * b.refill(500*time.Millisecond)
	t.Logf("first TTL after the kill (%s): survivors admitted %d, a strict bucket admits %d of the same checks: under-admission %.0f units; the dead node held %.0f (+ at most %.0f spent since its last renewal, + at most one share of %.1f in flight); longest gap between survivors' ALLOWs %s",
		ttl, adm1, ref1, under, held, sinceReport, share, gap.Round(time.Millisecond))
	if gap > time.Second {
		t.Errorf("the survivors admitted nothing for %s after the kill", gap.Round(time.Millisecond))
	}
	if under > held+sinceReport+share+slack {
		t.Errorf("the dead node's leases cost %.0f units of under-admission in the TTL after the kill; bound: held %.0f + spent since its last renewal %.0f + one share %.1f + 5%% slack %.1f",
			under, held, sinceReport, share, slack)
	}
	// Once the dead node's leases have expired, the survivors share the
	// whole limit.
	adm2, ref2 := in(w1, end)
	may2 := b.refill(end.Sub(w1))
	t.Logf("from a TTL after the kill (%s): survivors admitted %d of %.1f the limit refills (%.1f%%); a strict bucket admits %d of the same checks",
		end.Sub(w1).Round(time.Millisecond), adm2, may2, pct(float64(adm2), may2), ref2)
	if float64(adm2) < 0.9*may2 {
		t.Errorf("survivors admitted %d of %.1f (%.1f%%) once the dead node's leases expired, want at least 90%%", adm2, may2, pct(float64(adm2), may2))
	}
}

// TestLeaseLeaderChange: kill -9 the leader of a bucket's shard while the
// two other nodes serve leased checks with budget to spare (10000 per
// second, far above the demand). Their clients see no pause: the longest
// gap between ALLOWs stays well under an election (1-2s here).
func TestLeaseLeaderChange(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	item := leasedItem("user:leader-change", 10000, time.Second, 10000)
	s := keyShard(t, c, item) // one strict unit, before the traffic starts
	leader := preferredLeader(t, c, s)
	others := []int{(leader + 1) % 3, (leader + 2) % 3}

	tr := newTraffic(t, c, item)
	var stops []func()
	for _, i := range others {
		stops = append(stops, tr.start(i, 3, 4*time.Millisecond)) // ~750/s per node
	}
	time.Sleep(2 * time.Second) // traffic before the kill: the interval measured
	if l := c.ShardLeader(others[0], s); l >= 0 && l != leader {
		t.Fatalf("leadership of shard %d moved to %s before the kill", s, c.Nodes[l].ID)
	}
	held := []float64{c.Metric(others[0], "quorate_lease_budget_held"), c.Metric(others[1], "quorate_lease_budget_held")}
	kill := time.Now()
	c.Kill(leader)
	time.Sleep(4 * time.Second) // traffic through the election: the interval measured
	for _, stop := range stops {
		stop()
	}
	stopped := time.Now()
	ans := tr.wait()
	newLeader := c.ShardLeader(others[0], s)

	t0 := firstSent(ans)
	before, beforeAt := longestGap(ans, t0.Add(500*time.Millisecond), kill)
	gap, gapAt := longestGap(ans, kill, stopped)
	var slowest time.Duration
	for _, a := range ans {
		slowest = max(slowest, a.recv.Sub(a.sent))
	}
	k := count(ans)
	after := count(filter(ans, func(a answer) bool { return a.sent.After(kill) }))
	leaderID := "none"
	if newLeader >= 0 {
		leaderID = c.Nodes[newLeader].ID
	}
	t.Logf("shard %d leader %s killed at +%s; new leader %s; %s and %s held %.0f and %.0f units",
		s, c.Nodes[leader].ID, kill.Sub(t0).Round(time.Millisecond), leaderID,
		c.Nodes[others[0]].ID, c.Nodes[others[1]].ID, held[0], held[1])
	t.Logf("%d checks: %d ALLOW, %d OVER_LIMIT, %d UNAVAILABLE, %d other, %d RPC errors, %d decided strictly; after the kill: %d checks, %d ALLOW, %d UNAVAILABLE, %d strictly",
		k.total, k.allow, k.overLimit, k.unavailable, k.other+k.failOpen, k.errs, k.strict, after.total, after.allow, after.unavailable, after.strict)
	t.Logf("longest gap between ALLOWs any client saw: %s after the kill (from the kill %+dms on), %s before it (at +%s); slowest answer %s",
		gap.Round(time.Millisecond), gapAt.Sub(kill).Milliseconds(), before.Round(time.Millisecond),
		beforeAt.Sub(t0).Round(time.Millisecond), slowest.Round(time.Millisecond))
	if newLeader < 0 || newLeader == leader {
		t.Errorf("shard %d has no new leader after the kill", s)
	}
	if after.allow == 0 {
		t.Fatal("no ALLOW after the kill")
	}
	// The limit is far above demand, so a denial means a node ran out of
	// budget before the new leader could renew it: its reserve did not
	// cover the election. Allow a sliver for an election slowed down by a
	// loaded machine.
	if notAllowed := k.total - k.allow; notAllowed*100 > k.total*3 {
		t.Errorf("%d of %d checks were not allowed (limit far above demand), want at least 97%% allowed", notAllowed, k.total)
	}
	if gap >= 500*time.Millisecond {
		t.Errorf("leased checks paused for %s during the election, want well under 500ms", gap.Round(time.Millisecond))
	}
}

// TestLeaseFirstUse: without credits, the first leased check of a bucket
// on a node is decided by the grant that acquires its lease (one Raft
// commit), not by a grant and then a strict check. Concurrent first checks
// of one bucket share the grant, and a many-item request's grants go out
// together. (With credits, see TestLeaseCredits.)
func TestLeaseFirstUse(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{ExtraArgs: []string{"--lease-credits=false"}})
	const keys, clients = 120, 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var allowed, strict int
	var errs []error
	record := func(res *pb.CheckResponse, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, r := range res.Results {
			if r.Decision == pb.Decision_DECISION_ALLOW {
				allowed++
			}
			if r.Index != 0 {
				strict++
			}
		}
	}
	for cl := range clients {
		wg.Go(func() {
			for k := cl; k < keys; k += clients {
				// Two clients ask for each fresh key at once.
				item := leasedItem(fmt.Sprintf("first-use:%d", k), 1000, time.Second, 0)
				var pair sync.WaitGroup
				for range 2 {
					pair.Go(func() { record(leasedCheck(c, 0, item)) })
				}
				pair.Wait()
			}
		})
	}
	wg.Wait()
	var many []*pb.Item
	for k := range 50 {
		many = append(many, leasedItem(fmt.Sprintf("first-use-many:%d", k), 1000, time.Second, 0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	began := time.Now()
	record(c.Client(0).Check(ctx, &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: many}))
	took := time.Since(began)

	fallbacks := c.Metric(0, "quorate_leased_strict_fallbacks_total")
	acquired := c.Metric(0, "quorate_lease_grants_total", `result="acquired"`)
	t.Logf("%d fresh keys checked twice at once and one request of %d fresh keys (%s): %d ALLOW, %d decided strictly; %.0f leases acquired, %.0f strict fallbacks",
		keys, len(many), took.Round(time.Millisecond), allowed, strict, acquired, fallbacks)
	if len(errs) > 0 {
		t.Fatalf("%d checks failed, first: %v", len(errs), errs[0])
	}
	if want := 2*keys + len(many); allowed != want {
		t.Errorf("%d ALLOW, want %d: every bucket had budget", allowed, want)
	}
	if fallbacks != 0 || strict != 0 {
		t.Errorf("%.0f strict fallbacks (%d answers with a log index), want 0: first uses must be decided by their grants", fallbacks, strict)
	}
	if acquired != keys+float64(len(many)) {
		t.Errorf("%.0f leases acquired, want one per bucket (%d)", acquired, keys+len(many))
	}
}
