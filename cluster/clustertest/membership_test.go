package clustertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// memberLoad is strict and leased traffic through a set of nodes while the
// cluster's membership changes: strict keys on every shard with a budget
// that does not refill within the test, so every one of their ALLOWs is
// counted against the limit, and one leased key.
type memberLoad struct {
	t      *testing.T
	c      *clustertest.Cluster
	keys   []*pb.Item
	leased *pb.Item
	nodes  []int // the nodes the clients call: the ones that stay
	limit  int   // each strict key's

	mu      sync.Mutex
	allowed map[string]int  // strict key -> ALLOWs
	unknown map[string]int  // strict key -> checks that failed (outcome unknown)
	asked   map[string]int  // strict key -> checks sent
	leasedN int             // leased ALLOWs
	errs    []string        // distinct errors, a few
	decided []time.Time     // when each decision arrived
	lat     []time.Duration // every answered check's latency
	failed  int             // checks that returned an error
	total   int             // checks sent
	stop    chan struct{}
	wg      sync.WaitGroup
}

const (
	memberKeyLimit    = 40
	memberLeasedLimit = 3000
)

func newMemberLoad(t *testing.T, c *clustertest.Cluster, name string, keys int, nodes ...int) *memberLoad {
	return newMemberLoadLimit(t, c, name, keys, memberKeyLimit, nodes...)
}

// newMemberLoadLimit is newMemberLoad with each strict key's limit.
func newMemberLoadLimit(t *testing.T, c *clustertest.Cluster, name string, keys, limit int, nodes ...int) *memberLoad {
	l := &memberLoad{t: t, c: c, nodes: nodes, limit: limit, allowed: map[string]int{}, unknown: map[string]int{}, asked: map[string]int{}, stop: make(chan struct{})}
	for i := range keys {
		// A limit per 8,000 hours refills less than one token in a test.
		l.keys = append(l.keys, clustertest.Item(name, fmt.Sprintf("k%d", i), int64(limit), 8000*time.Hour))
	}
	l.leased = leasedItem(name+"-leased", memberLeasedLimit, 8000*time.Hour, 0)
	return l
}

// run starts workers strict clients and two leased ones, each on the next
// node in turn.
func (l *memberLoad) run(workers int) {
	for w := range workers + 2 {
		l.wg.Go(func() {
			node := l.nodes[w%len(l.nodes)]
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				var it *pb.Item
				mode := pb.Mode_MODE_STRICT
				if w >= workers {
					it, mode = l.leased, pb.Mode_MODE_LEASED
				} else {
					it = l.keys[i%len(l.keys)]
				}
				l.one(node, it, mode)
				if mode == pb.Mode_MODE_LEASED {
					time.Sleep(2 * time.Millisecond) // the leased clients' pace
				}
			}
		})
	}
}

// awaitDecisions waits until n more checks than now have been decided:
// traffic that ran on the cluster as it is now.
func (l *memberLoad) awaitDecisions(n int) {
	l.t.Helper()
	l.mu.Lock()
	from := len(l.decided)
	l.mu.Unlock()
	await.True(l.t, 60*time.Second, fmt.Sprintf("%d more decisions", n), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.decided) >= from+n
	})
}

func (l *memberLoad) one(node int, it *pb.Item, mode pb.Mode) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	sent := time.Now()
	resp, err := l.c.Client(node).Check(ctx, &pb.CheckRequest{Mode: mode, Items: []*pb.Item{it}})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if mode == pb.Mode_MODE_STRICT {
		l.asked[it.GetKey()]++
	}
	if err == nil && resp.GetResults()[0].GetReason() == pb.Reason_REASON_UNAVAILABLE {
		err = fmt.Errorf("fail mode: %v", resp.GetResults()[0].GetReason())
	}
	if err != nil {
		l.failed++
		if mode == pb.Mode_MODE_STRICT {
			l.unknown[it.GetKey()]++
		}
		if msg := err.Error(); len(l.errs) < 5 && !slices.Contains(l.errs, msg) {
			l.errs = append(l.errs, msg)
		}
		return
	}
	l.decided = append(l.decided, time.Now())
	l.lat = append(l.lat, time.Since(sent))
	if resp.GetDecision() != pb.Decision_DECISION_ALLOW {
		return
	}
	if mode == pb.Mode_MODE_LEASED {
		l.leasedN++
	} else {
		l.allowed[it.GetKey()]++
	}
}

// finish stops the load and checks the admission promise: no strict key
// allowed more than its limit, and every key whose checks all had a known
// outcome allowed exactly its limit once it was asked more often; the
// leased key never more than its limit. It returns a summary.
func (l *memberLoad) finish() string {
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	exhausted := 0
	for _, k := range l.keys {
		a, u := l.allowed[k.GetKey()], l.unknown[k.GetKey()]
		if a > l.limit {
			l.t.Errorf("strict key %s allowed %d, more than its limit %d", k.GetKey(), a, l.limit)
		}
		if u == 0 && l.asked[k.GetKey()] >= l.limit && a != l.limit {
			l.t.Errorf("strict key %s allowed %d of %d checks, every outcome known; want exactly its limit %d", k.GetKey(), a, l.asked[k.GetKey()], l.limit)
		}
		if a+u >= l.limit {
			exhausted++
		}
	}
	if l.leasedN > memberLeasedLimit {
		l.t.Errorf("leased key allowed %d, more than its limit %d", l.leasedN, memberLeasedLimit)
	}
	// Nothing was reset: after the moves every strict key allowed its
	// whole limit is still empty on the new replicas. (A key short of it
	// with unknown outcomes may have a unit left: a check answered by its
	// fail mode may not have been applied.)
	for _, k := range l.keys {
		if l.allowed[k.GetKey()] < l.limit {
			continue
		}
		resp, err := check(l.t, l.c, l.nodes[0], k)
		if err != nil {
			l.t.Errorf("check of %s after the moves: %v", k.GetKey(), err)
		} else if resp.GetDecision() == pb.Decision_DECISION_ALLOW {
			l.t.Errorf("key %s was exhausted (allowed %d, %d unknown) but is allowed again afterwards: its bucket was reset",
				k.GetKey(), l.allowed[k.GetKey()], l.unknown[k.GetKey()])
		}
	}
	return fmt.Sprintf("%d checks, %d failed (%.2f%%), p99 %s, longest gap between decisions %s; %d of %d strict keys exhausted; leased allowed %d of %d; errors: %s",
		l.total, l.failed, 100*float64(l.failed)/float64(max(l.total, 1)), p99(l.lat), longestDecisionGap(l.decided),
		exhausted, len(l.keys), l.leasedN, memberLeasedLimit, strings.Join(l.errs, " | "))
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)*99/100]
}

func longestDecisionGap(at []time.Time) time.Duration {
	s := slices.Clone(at)
	sort.Slice(s, func(i, j int) bool { return s[i].Before(s[j]) })
	var gap time.Duration
	for i := 1; i < len(s); i++ {
		gap = max(gap, s[i].Sub(s[i-1]))
	}
	return gap
}

func statusOf(t *testing.T, c *clustertest.Cluster, i int) *pb.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.Client(i).Status(ctx)
	if err != nil {
		t.Fatalf("status of %s: %v", c.Nodes[i].ID, err)
	}
	return st
}

// awaitPlacement waits until the nodes in want agree: no move in progress,
// every shard with replicas replicas, all on nodes in want, every one of
// which holds some, and every hosted replica's Raft configuration has
// exactly the record's replicas as voters. It returns how long that took.
func awaitPlacement(t *testing.T, c *clustertest.Cluster, replicas int, want []string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	await.Until(t, within, func() error {
		if p := placementProblem(t, c, replicas, want); p != "" {
			return errors.New("placement not settled: " + p)
		}
		return nil
	})
	return time.Since(start)
}

func placementProblem(t *testing.T, c *clustertest.Cluster, replicas int, want []string) string {
	for i, nd := range c.Nodes {
		if !slices.Contains(want, nd.ID) {
			continue
		}
		if p := placementProblemAt(statusOf(t, c, i), replicas, want); p != "" {
			return nd.ID + ": " + p
		}
	}
	return ""
}

func placementProblemAt(st *pb.StatusResponse, replicas int, want []string) string {
	if len(st.GetMoves()) > 0 {
		return fmt.Sprintf("%d moves in progress", len(st.GetMoves()))
	}
	held := map[string]int{}
	for _, sh := range st.GetShards() {
		reps := sh.GetReplicas()
		if len(reps) != replicas {
			return fmt.Sprintf("shard %d has replicas %v", sh.GetId(), reps)
		}
		for _, id := range reps {
			if !slices.Contains(want, id) {
				return fmt.Sprintf("shard %d has a replica on %s", sh.GetId(), id)
			}
			held[id]++
		}
		if v := sh.GetVoters(); len(v) > 0 {
			v, r := slices.Sorted(slices.Values(v)), slices.Sorted(slices.Values(reps))
			if !slices.Equal(v, r) {
				return fmt.Sprintf("shard %d: the record places it on %v, its Raft voters are %v", sh.GetId(), r, v)
			}
		}
	}
	for _, id := range want {
		if held[id] == 0 {
			return fmt.Sprintf("%s holds no replica", id)
		}
	}
	return ""
}

// TestMembershipGrowAndShrink grows a three-node cluster to five under
// strict and leased traffic, then shrinks it back to three by graceful
// leaves (one through Admin.Leave, one through SIGTERM with
// --leave-on-terminate): every shard ends with three replicas on the nodes
// that remain, strict keys are exact and never reset, the leased key
// never over its limit.
func TestMembershipGrowAndShrink(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 8})
	load := newMemberLoad(t, c, "grow", 16, 0, 1, 2)
	load.run(12)

	start := time.Now()
	n4 := c.Add("n4")
	n5 := c.Add("n5", "--leave-on-terminate", "--log-level", "info")
	c.WaitReady(60*time.Second, n4, n5)
	ready := time.Since(start)
	five := []string{"n1", "n2", "n3", "n4", "n5"}
	settled := awaitPlacement(t, c, 3, five, 90*time.Second)
	load.awaitDecisions(200) // traffic on the five-node placement
	t.Logf("grow 3 -> 5: both new nodes ready after %s, every shard placed over five nodes after %s", ready.Round(time.Millisecond), (ready + settled).Round(time.Millisecond))
	t.Logf("grow load: %s", load.finish())

	load = newMemberLoad(t, c, "shrink", 16, 0, 1, 2)
	load.run(12)
	start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	resp, err := adminClient(t, c, n4, "operator").Leave(ctx, &pb.LeaveRequest{})
	cancel()
	if err != nil {
		t.Fatalf("n4 leave: %v", err)
	}
	t.Logf("n4 left at epoch %d after %s", resp.GetEpoch(), time.Since(start).Round(time.Millisecond))
	waitExit(t, c, n4, 10*time.Second)
	start = time.Now()
	c.Stop(n5) // --leave-on-terminate
	t.Logf("n5 left on SIGTERM and exited after %s", time.Since(start).Round(time.Millisecond))
	three := []string{"n1", "n2", "n3"}
	awaitPlacement(t, c, 3, three, 60*time.Second)
	load.awaitDecisions(200) // traffic on the three nodes left
	for _, id := range []string{"n4", "n5"} {
		if m := membershipOf(statusOf(t, c, 0), id); m != "left" {
			t.Errorf("%s is %q in the record; want left", id, m)
		}
	}
	if !strings.Contains(c.Log(n5), "leaving the cluster before stopping") {
		t.Errorf("n5 did not leave on SIGTERM:\n%s", c.Log(n5))
	}
	t.Logf("shrink load: %s", load.finish())
}

func membershipOf(st *pb.StatusResponse, id string) string {
	for _, n := range st.GetNodes() {
		if n.GetId() == id {
			return n.GetMembership()
		}
	}
	return ""
}

func waitExit(t *testing.T, c *clustertest.Cluster, i int, within time.Duration) {
	t.Helper()
	await.Until(t, within, func() error {
		if c.Running(i) {
			return fmt.Errorf("%s still running:\n%s", c.Nodes[i].ID, c.Log(i))
		}
		return nil
	})
}

// TestMembershipReplaceDead kills -9 one node of a four-node cluster under
// strict and leased traffic and waits past the dead-node grace: the meta
// leader replaces it and every shard is back to three replicas on the
// survivors, with the counts preserved. Then the replaced node restarts
// with its old data: it learns it was removed, says so and stops, and the
// groups are not disturbed (no leader changes on the survivors).
func TestMembershipReplaceDead(t *testing.T) {
	const grace = 3 * time.Second
	c := clustertest.Start(t, 4, clustertest.Options{Shards: 8, ExtraArgs: []string{"--dead-node-grace", grace.String()}})
	load := newMemberLoad(t, c, "replace", 16, 0, 1, 2)
	load.run(12)
	load.awaitDecisions(100) // traffic before the kill

	const victim = 3
	held := map[uint32]bool{}
	for _, sh := range statusOf(t, c, 0).GetShards() {
		if slices.Contains(sh.GetReplicas(), c.Nodes[victim].ID) {
			held[sh.GetId()] = true
		}
	}
	killed := time.Now()
	c.Kill(victim)
	restored := map[uint32]time.Duration{}
	seenUnder := map[uint32]bool{}
	survivors := []string{"n1", "n2", "n3"}
	// Records when each shard is restored; one never restored is reported
	// below.
	_ = await.Wait(90*time.Second, func() error {
		st := statusOf(t, c, 0)
		under := st.GetUnderReplicated()
		for s := range held {
			if slices.Contains(under, s) {
				seenUnder[s] = true
				continue
			}
			reps := replicasOf(st, s)
			if _, done := restored[s]; !done && seenUnder[s] && len(reps) == 3 && !slices.Contains(reps, c.Nodes[victim].ID) {
				restored[s] = time.Since(killed)
			}
		}
		if len(restored) < len(held) {
			return fmt.Errorf("%d of %d shards restored", len(restored), len(held))
		}
		return nil
	})
	awaitPlacement(t, c, 3, survivors, 90*time.Second)
	total := time.Since(killed)
	var per []string
	for _, s := range slices.Sorted(maps.Keys(restored)) {
		per = append(per, fmt.Sprintf("shard %d %s", s, restored[s].Round(10*time.Millisecond)))
	}
	t.Logf("kill -9 of %s (grace %s): %d shards it held back to 3 replicas: %s; all settled %s after the kill",
		c.Nodes[victim].ID, grace, len(held), strings.Join(per, ", "), total.Round(10*time.Millisecond))
	if len(restored) != len(held) {
		t.Errorf("restored %d of the %d shards the dead node held", len(restored), len(held))
	}
	if m := membershipOf(statusOf(t, c, 0), c.Nodes[victim].ID); m != "removed" {
		t.Errorf("%s is %q in the record; want removed", c.Nodes[victim].ID, m)
	}
	// The balancer moves leaders back to their preferred replicas after
	// the moves: that is not the return's doing, so it is waited out.
	settledLeaders(t, c, 0, 30*time.Second)

	// The replaced node comes back with its old data.
	changes := func() float64 {
		return c.Metric(0, "quorate_leader_changes_total") + c.Metric(1, "quorate_leader_changes_total") + c.Metric(2, "quorate_leader_changes_total")
	}
	before := changes()
	c.Restart(victim)
	waitExit(t, c, victim, 20*time.Second)
	if log := c.Log(victim); !strings.Contains(log, "was removed from the cluster") || !strings.Contains(log, "empty its --data directory") {
		t.Errorf("the replaced node does not say why it stops:\n%s", log)
	}
	// An election its return caused would come within a second: the
	// absence of one can only be watched for a while.
	time.Sleep(time.Second)
	if after := changes(); after != before {
		t.Errorf("the replaced node's return changed leaders %v times on the survivors", after-before)
	}
	awaitPlacement(t, c, 3, survivors, 10*time.Second)
	t.Logf("load: %s", load.finish())
}

func replicasOf(st *pb.StatusResponse, s uint32) []string {
	for _, sh := range st.GetShards() {
		if sh.GetId() == s {
			return sh.GetReplicas()
		}
	}
	return nil
}

// TestMembershipMetaLeaderDies kills -9 the meta leader while the replica
// moves of a grow are in progress, one at a time (--max-moves 1), and
// restarts it: the new meta leader resumes the recorded moves, and every
// shard ends with three replicas over the five nodes, its Raft voters
// those of the record, with the strict keys exact.
func TestMembershipMetaLeaderDies(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 8, ExtraArgs: []string{"--max-moves", "1"}})
	leader := -1
	for i := range 3 {
		if c.Metric(i, "quorate_group_leader", `group="meta"`) == 1 {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no node reports leading the meta group")
	}
	load := newMemberLoad(t, c, "metadies", 16, (leader+1)%3, (leader+2)%3)
	load.run(12)
	c.Add("n4")
	c.Add("n5")
	await.True(t, 30*time.Second, "a move to start after the joins", func() bool {
		return len(statusOf(t, c, (leader+1)%3).GetMoves()) > 0
	})
	if c.Metric(leader, "quorate_group_leader", `group="meta"`) != 1 {
		t.Fatalf("%s no longer leads the meta group", c.Nodes[leader].ID)
	}
	epoch := statusOf(t, c, (leader+1)%3).GetEpoch()
	c.Kill(leader)
	t.Logf("killed the meta leader %s at epoch %d, a move in progress", c.Nodes[leader].ID, epoch)
	// Another node takes the meta group over while the old leader is dead.
	await.True(t, 30*time.Second, "another node to lead the meta group", func() bool {
		for i := range c.Nodes {
			if i != leader && c.Running(i) && c.Metric(i, "quorate_group_leader", `group="meta"`) == 1 {
				return true
			}
		}
		return false
	})
	c.Restart(leader)
	c.WaitReady(60*time.Second, leader)
	settled := awaitPlacement(t, c, 3, []string{"n1", "n2", "n3", "n4", "n5"}, 120*time.Second)
	if st := statusOf(t, c, (leader+1)%3); st.GetEpoch() <= epoch {
		t.Errorf("epoch %d after the kill at %d: the moves did not resume", st.GetEpoch(), epoch)
	}
	t.Logf("placement settled %s after the restart", settled.Round(time.Millisecond))
	t.Logf("load: %s", load.finish())
}

// TestMembershipLostDisk: a node of a three-node cluster loses its disk.
// The cluster cannot replace it by itself (the two others cannot hold three
// replicas), so an operator removes it: its groups shrink to the two
// others; then it starts again with an empty data dir under its old id,
// joins, and every shard is back to three replicas, the counts preserved.
func TestMembershipLostDisk(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 8})
	load := newMemberLoad(t, c, "lostdisk", 16, 0, 1)
	load.run(12)
	load.awaitDecisions(100) // traffic before the kill
	c.Kill(2)
	if err := os.RemoveAll(c.Nodes[2].Data); err != nil {
		t.Fatal(err)
	}
	admin := adminClient(t, c, 0, "operator")
	start := time.Now()
	var refusals int
	await.Until(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := admin.RemoveNode(ctx, &pb.RemoveNodeRequest{NodeId: "n3"})
		cancel()
		if err != nil && (status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "is alive")) {
			t.Fatalf("remove n3: %v", err)
		}
		if err != nil {
			refusals++ // gossip has not noticed the kill yet
		}
		return err
	})
	two := awaitPlacement(t, c, 2, []string{"n1", "n2"}, 60*time.Second)
	t.Logf("n3 removed after %s (%d refusals while gossip still had it alive); its replicas gone from every group %s later",
		time.Since(start).Round(time.Millisecond)-two.Round(time.Millisecond), refusals, two.Round(time.Millisecond))
	start = time.Now()
	c.Restart(2)
	c.WaitReady(60*time.Second, 2)
	back := awaitPlacement(t, c, 3, []string{"n1", "n2", "n3"}, 60*time.Second)
	t.Logf("n3 rejoined with an empty data dir: ready after %s, every shard back to three replicas %s later",
		(time.Since(start) - back).Round(time.Millisecond), back.Round(time.Millisecond))
	if m := membershipOf(statusOf(t, c, 0), "n3"); m != "active" {
		t.Errorf("n3 is %q after it joined again; want active", m)
	}
	t.Logf("load: %s", load.finish())
}
