package telemetry

import (
	"fmt"
	"testing"
	"time"
)

// value reads a counter or gauge of the registry by name and labels.
func value(t *testing.T, m *Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, mt := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range mt.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			if c := mt.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return mt.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestPolicyLabelsBounded: past 1000 policy ids, decisions count under
// policy="_other", and the overflow is counted.
func TestPolicyLabelsBounded(t *testing.T) {
	m := New()
	for i := range maxPolicyLabels + 5 {
		m.PolicyOutcome(fmt.Sprint("p", i), "allowed")
	}
	m.PolicyOutcome("p0", "denied") // an id with a series keeps it
	if v, _ := value(t, m, "quorate_policy_decisions_total", map[string]string{"policy": "_other", "outcome": "allowed"}); v != 5 {
		t.Errorf("_other: %v, want 5", v)
	}
	if v, _ := value(t, m, "quorate_policy_label_overflow_total", nil); v != 5 {
		t.Errorf("overflow: %v, want 5", v)
	}
	if v, _ := value(t, m, "quorate_policy_decisions_total", map[string]string{"policy": "p0", "outcome": "denied"}); v != 1 {
		t.Errorf("p0 denied: %v, want 1", v)
	}
}

// TestDecisionMetrics: what the engine reports lands under the metric
// names and labels the README and dashboards use.
func TestDecisionMetrics(t *testing.T) {
	m := New()
	m.Item("strict", "deny", "over_limit")
	m.Request("strict", "deny", 3*time.Millisecond)
	m.FailMode("closed")
	m.Refunds("ok", 2)
	m.Rerouted("sent", 3)
	m.DenyCache("hit", 4)
	m.PolicySet(7, 12, time.Second, true)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"quorate_checks_total", map[string]string{"mode": "strict", "decision": "deny", "reason": "over_limit"}, 1},
		{"quorate_check_requests_total", map[string]string{"mode": "strict", "decision": "deny"}, 1},
		{"quorate_unavailable_total", map[string]string{"fail": "closed"}, 1},
		{"quorate_cross_shard_refunds_total", map[string]string{"result": "ok"}, 2},
		{"quorate_checks_rerouted_total", map[string]string{"outcome": "sent"}, 3},
		{"quorate_deny_cache_total", map[string]string{"outcome": "hit"}, 4},
		{"quorate_policy_version", nil, 7},
		{"quorate_policies", nil, 12},
	} {
		if v, ok := value(t, m, c.name, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
}
