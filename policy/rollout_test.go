package policy

import (
	"fmt"
	"testing"
	"time"
)

// enforcedTenants resolves n tenants against a one-policy set rolled out
// to percent, and returns the tenants it enforces.
func enforcedTenants(t *testing.T, percent float64, n int) map[string]bool {
	t.Helper()
	doc := fmt.Sprintf(`policies:
  - { policy_id: new_limit, key: [tenant_id], algorithm: GCRA, config: { rate: 5/s }, rollout: { percent: %v } }
`, percent)
	ps, err := Parse("rollout.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for i := range n {
		id := fmt.Sprintf("t_%d", i)
		res := snap.Resolve(&Request{TenantID: id}, time.Unix(0, 0))
		if len(res.Applied) != 1 {
			t.Fatalf("%s: %d evaluations, want 1", id, len(res.Applied))
		}
		if res.Applied[0].Mode != Shadow {
			out[id] = true
		}
	}
	return out
}

// A 10% rollout enforces 9-11% of 10,000 tenants, the same ones from a set
// compiled anew (another node, or after a restart), and raising the share
// keeps them.
func TestRolloutShare(t *testing.T) {
	ten := enforcedTenants(t, 10, 10_000)
	if n := len(ten); n < 900 || n > 1100 {
		t.Fatalf("a 10%% rollout enforced %d of 10000 tenants, want 900..1100", n)
	}
	again := enforcedTenants(t, 10, 10_000)
	if len(again) != len(ten) {
		t.Fatalf("compiled again, %d enforced instead of %d", len(again), len(ten))
	}
	for id := range ten {
		if !again[id] {
			t.Fatalf("%s enforced once, not when the set was compiled again", id)
		}
	}
	twenty := enforcedTenants(t, 20, 10_000)
	for id := range ten {
		if !twenty[id] {
			t.Fatalf("%s enforced at 10%% but not at 20%%", id)
		}
	}
	if n := len(twenty); n < 1800 || n > 2200 {
		t.Fatalf("a 20%% rollout enforced %d of 10000 tenants, want 1800..2200", n)
	}
	if n := len(enforcedTenants(t, 100, 1000)); n != 1000 {
		t.Fatalf("100%% enforced %d of 1000", n)
	}
	t.Logf("10%%: %d of 10000 enforced; 20%%: %d", len(ten), len(twenty))
}
