package telemetry

import (
	"fmt"
	"testing"
	"time"
)

// TestPolicyTotals: the in-memory totals the status page reads agree with
// the metric, and are bounded the same way.
func TestPolicyTotals(t *testing.T) {
	m := New()
	for i := range maxPolicyLabels + 3 {
		m.PolicyOutcome(fmt.Sprint("p", i), "allowed")
	}
	m.PolicyOutcome("p1", "denied")
	m.PolicyOutcome("p1", "shadow_would_deny")
	m.PolicyOutcome("p1", "fail_open")
	m.PolicyOutcome("p1", "throttled")
	totals := m.PolicyTotals()
	if len(totals) != maxPolicyLabels+1 {
		t.Fatalf("%d totals, want %d (every admitted id and _other)", len(totals), maxPolicyLabels+1)
	}
	byID := map[string]PolicyTotal{}
	for _, pt := range totals {
		byID[pt.ID] = pt
	}
	if p1 := byID["p1"]; p1 != (PolicyTotal{ID: "p1", Allowed: 1, Denied: 1, ShadowWouldDeny: 1, FailOpen: 1, Throttled: 1}) {
		t.Errorf("p1: %+v", p1)
	}
	if o := byID[otherPolicyLabel]; o.Allowed != 3 {
		t.Errorf("_other: %+v, want 3 allowed", o)
	}
}

// TestEvents: the ring keeps the newest n, newest first.
func TestEvents(t *testing.T) {
	r := NewEvents(3)
	if got := r.Recent(); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	t0 := time.Unix(100, 0)
	for i := range 5 {
		r.Add(Event{Time: t0.Add(time.Duration(i) * time.Second), Policy: fmt.Sprint("p", i)})
	}
	got := r.Recent()
	if len(got) != 3 || got[0].Policy != "p4" || got[1].Policy != "p3" || got[2].Policy != "p2" {
		t.Errorf("recent: %+v, want p4 p3 p2", got)
	}
}
