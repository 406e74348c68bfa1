package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/quorate/quorate/cluster/meta"
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
		if c.allow("a", l, 1, t0, false) {
			ok++
		}
	}
	if ok != 10 {
		t.Errorf("admitted %d at one instant; want the capacity, 10", ok)
	}
	if !c.allow("a", l, 1, t0.Add(100*time.Millisecond), false) || c.allow("a", l, 1, t0.Add(100*time.Millisecond), false) {
		t.Errorf("100ms later: want exactly one more (10/s)")
	}
	for range 20 {
		if !c.allow("b", l, 1, t0, true) {
			t.Fatal("a peek at a fresh key's cap was refused")
		}
	}
	if !c.allow("b", l, 10, t0, false) {
		t.Errorf("peeks took from the cap: 10 refused after 20 peeks")
	}
	c.allow("c", l, 1, t0, false)
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
// replicas than the replication factor are on member nodes alive or
// suspect.
func TestUnderReplicated(t *testing.T) {
	rec := &meta.Record{Replicas: 2, Placement: [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}},
		Nodes: []meta.NodeInfo{{ID: "a"}, {ID: "b"}, {ID: "c"}}}
	members := map[string]*memberlist.Node{
		"a": {State: memberlist.StateAlive},
		"b": {State: memberlist.StateSuspect},
		"c": {State: memberlist.StateDead},
	}
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{1, 2}) {
		t.Errorf("underReplicated = %v; want [1 2] (c is dead, b only suspect)", got)
	}
	// A replaced node that came back is alive but holds nothing.
	members["c"] = &memberlist.Node{State: memberlist.StateAlive}
	rec.Nodes[2].State = meta.StateRemoved
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{1, 2}) {
		t.Errorf("with c removed but alive: %v; want [1 2]", got)
	}
	delete(members, "a")
	if got := underReplicated(rec, members); !slices.Equal(got, []uint32{0, 1, 2}) {
		t.Errorf("with a unknown to gossip: %v; want every shard", got)
	}
}

// TestExplainResults: the deciding policy and the reason of a descriptor
// check, from its policies' verdicts.
func TestExplainResults(t *testing.T) {
	over := func() *pb.ItemResult {
		return &pb.ItemResult{Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_OVER_LIMIT, Remaining: 0}
	}
	ok := func(rem int64) *pb.ItemResult {
		return &pb.ItemResult{Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT, Remaining: rem}
	}
	down := func() *pb.ItemResult {
		return &pb.ItemResult{Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_UNAVAILABLE}
	}
	ev := func(id string, m policy.Mode, first int) evaluated {
		return evaluated{ev: policy.Evaluation{PolicyID: id, Mode: m, Items: []policy.Item{{Name: id}}}, first: first}
	}
	for _, tt := range []struct {
		name       string
		evs        []evaluated
		results    []*pb.ItemResult
		decision   pb.Decision
		wantID     string
		wantReason pb.Reason
	}{
		{"tightest hard decides an allow", []evaluated{ev("a", policy.Hard, 0), ev("b", policy.Hard, 1)},
			[]*pb.ItemResult{ok(9), ok(2)}, pb.Decision_DECISION_ALLOW, "b", pb.Reason_REASON_WITHIN_LIMIT},
		{"the denying hard policy decides", []evaluated{ev("a", policy.Hard, 0), ev("b", policy.Hard, 1)},
			[]*pb.ItemResult{over(), ok(2)}, pb.Decision_DECISION_DENY, "a", pb.Reason_REASON_OVER_LIMIT},
		{"a shadow alone names no policy", []evaluated{ev("s", policy.Shadow, 0)},
			[]*pb.ItemResult{over()}, pb.Decision_DECISION_ALLOW, "", pb.Reason_REASON_SHADOW_WOULD_DENY},
		{"a soft alone is named", []evaluated{ev("s", policy.Shadow, 0), ev("f", policy.Soft, 1)},
			[]*pb.ItemResult{ok(1), over()}, pb.Decision_DECISION_ALLOW, "f", pb.Reason_REASON_OVER_LIMIT_SOFT},
		{"a soft policy's outage is not over its limit", []evaluated{ev("h", policy.Hard, 0), ev("f", policy.Soft, 1)},
			[]*pb.ItemResult{ok(5), down()}, pb.Decision_DECISION_ALLOW, "h", pb.Reason_REASON_WITHIN_LIMIT},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := &Node{metrics: newMetrics()}
			resp := &pb.CheckResponse{Decision: tt.decision, Results: tt.results}
			n.explainResults(resp, tt.evs, make([]item, len(tt.results)))
			if resp.AppliedPolicyId != tt.wantID || resp.Reason != tt.wantReason {
				t.Errorf("applied %q, reason %v; want %q, %v", resp.AppliedPolicyId, resp.Reason, tt.wantID, tt.wantReason)
			}
		})
	}
}
