package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// TestJitterBounds: a retry-after is never shortened, and lengthened by at
// most a tenth, capped at a second; over many draws it varies.
func TestJitterBounds(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 800 * time.Millisecond, time.Minute} {
		seen := map[time.Duration]bool{}
		for range 200 {
			j := jitter(d)
			if j < d || j > d+min(d/10, time.Second) {
				t.Fatalf("jitter(%v) = %v; want in [d, d+min(d/10, 1s)]", d, j)
			}
			seen[j] = true
		}
		if d >= 800*time.Millisecond && len(seen) < 10 {
			t.Errorf("jitter(%v) took %d values in 200 draws; want spread", d, len(seen))
		}
	}
}

// TestEmergencyCap: the cap admits its capacity, then its rate, per bucket
// key; a full table starts afresh and counts it.
func TestEmergencyCap(t *testing.T) {
	var resets int
	c := newEmergencyCaps(func() { resets++ })
	c.max = 2
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Second}
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	var ok int
	for range 15 {
		if c.allow("a", l, 1, t0) {
			ok++
		}
	}
	if ok != 10 {
		t.Errorf("admitted %d at one instant; want the capacity, 10", ok)
	}
	if !c.allow("a", l, 1, t0.Add(100*time.Millisecond)) || c.allow("a", l, 1, t0.Add(100*time.Millisecond)) {
		t.Errorf("100ms later: want exactly one more (10/s)")
	}
	c.allow("b", l, 1, t0)
	c.allow("c", l, 1, t0)
	if resets != 1 {
		t.Errorf("resets = %d after a third key in a table of 2; want 1", resets)
	}
}

// TestRequestDecisionIgnoresSoft: only hard items deny the request.
func TestRequestDecisionIgnoresSoft(t *testing.T) {
	deny := &pb.ItemResult{Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_OVER_LIMIT}
	allow := &pb.ItemResult{Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT}
	if d := requestDecision([]item{{}, {soft: true}}, []*pb.ItemResult{allow, deny}); d != pb.Decision_DECISION_ALLOW {
		t.Errorf("a soft denial denied the request")
	}
	if d := requestDecision([]item{{soft: true}, {}}, []*pb.ItemResult{allow, deny}); d != pb.Decision_DECISION_DENY {
		t.Errorf("a hard denial did not deny the request")
	}
}

// TestEmergencyCapBoundsFailOpen: a fail-open policy with an emergency cap
// admits the cap's capacity while its shard cannot decide, then denies; a
// fail-closed one denies at once; one without a cap admits everything.
func TestEmergencyCapBoundsFailOpen(t *testing.T) {
	n := &Node{metrics: newMetrics()}
	n.caps = newEmergencyCaps(func() {})
	capped := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 3, Period: time.Hour}
	evs := []policy.Evaluation{
		{PolicyID: "capped", Mode: policy.Hard, Fail: policy.FailOpen, EmergencyCap: &capped, Items: []policy.Item{{Name: "capped", Key: "t", Limit: capped, Cost: 1}}},
		{PolicyID: "open", Mode: policy.Hard, Fail: policy.FailOpen, Items: []policy.Item{{Name: "open", Key: "t", Limit: capped, Cost: 1}}},
		{PolicyID: "closed", Mode: policy.Hard, Fail: policy.FailClosed, Items: []policy.Item{{Name: "closed", Key: "t", Limit: capped, Cost: 1}}},
	}
	items, _, err := policyItems(evs, &Limits{MaxRequestItems: 10})
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]int{}
	for range 10 {
		for i, id := range []string{"capped", "open", "closed"} {
			if n.failMode(items[i], 0).GetDecision() == pb.Decision_DECISION_ALLOW {
				allowed[id]++
			}
		}
	}
	if allowed["capped"] != 3 || allowed["open"] != 10 || allowed["closed"] != 0 {
		t.Errorf("fail-mode admissions of 10: %v; want capped 3, open 10, closed 0", allowed)
	}
}

// TestUnderReplicated: a shard is under-replicated when fewer of its
// replicas than the replication factor are on nodes alive or suspect.
func TestUnderReplicated(t *testing.T) {
	rec := &record{Replicas: 2, Placement: [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}}}
	members := map[string]*memberlist.Node{
		"a": {State: memberlist.StateAlive},
		"b": {State: memberlist.StateSuspect},
		"c": {State: memberlist.StateDead},
	}
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{1, 2}) {
		t.Errorf("underReplicated = %v; want [1 2] (c is dead, b only suspect)", got)
	}
	delete(members, "a")
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{0, 1, 2}) {
		t.Errorf("with a unknown to gossip: %v; want every shard", got)
	}
}
