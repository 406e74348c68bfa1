package clustertest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// rolloutPolicies: one request per tenant an hour, enforced for 10% of
// tenants.
const rolloutPolicies = `policies:
  - policy_id: ro_one
    key: [tenant_id]
    scope: { tenant_id: "ro_*" }
    algorithm: FIXED_WINDOW
    config: { limit: 1/1h }
    rollout: { percent: 10 }
`

const rolloutTenants = 10_000

// TestRollout: a policy rolled out to 10% of 10,000 tenants denies a second
// request of 9-11% of them, exactly the tenants the policy's own rule picks,
// whichever node decides and after a restart; for the rest it is counted as
// a shadow that would have denied.
func TestRollout(t *testing.T) {
	t.Parallel() // beside TestRestartedLeaderReadySoon's 30s of a node down: CPU it leaves idle
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	applied, err := adminClient(t, c, 0, "operator").ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: rolloutPolicies, SourceName: "rollout.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	awaitVersion(t, c, applied.GetVersion(), 10*time.Second)
	want := rolloutPicks(t)
	if n := len(want); n < 900 || n > 1100 {
		t.Fatalf("the rule picks %d of %d tenants, want 900..1100", n, rolloutTenants)
	}

	// Each tenant's first request on one node, its second on the next: the
	// second is denied where the rollout enforces.
	check := func(node int, tenant string) pb.Decision {
		resp, err := c.Client(node).Check(ctx, &pb.CheckRequest{Descriptors: &pb.Descriptors{TenantId: tenant}})
		if err != nil {
			t.Errorf("%s on n%d: %v", tenant, node+1, err)
			return pb.Decision_DECISION_UNSPECIFIED
		}
		return resp.GetDecision()
	}
	denied := inParallel(rolloutTenants, func(i int) bool {
		tenant := fmt.Sprint("ro_", i)
		if d := check(i%3, tenant); d != pb.Decision_DECISION_ALLOW {
			t.Errorf("%s: first request %v", tenant, d)
		}
		return check((i+1)%3, tenant) == pb.Decision_DECISION_DENY
	})
	if t.Failed() {
		t.FailNow()
	}
	sameTenants(t, "second requests", denied, want, func(i int) bool { return true })
	t.Logf("enforced %d of %d tenants (%.1f%%)", len(denied), rolloutTenants, 100*float64(len(denied))/rolloutTenants)
	shadow := 0.0
	for i := range c.Nodes {
		shadow += c.Metric(i, "quorate_policy_decisions_total", `policy="ro_one"`, `outcome="shadow_would_deny"`)
	}
	if int(shadow) != rolloutTenants-len(want) {
		t.Errorf("%v shadow would-denies counted, want %d (the tenants left out)", shadow, rolloutTenants-len(want))
	}

	// n2 restarted decides a third request of the tenants whose second it
	// decided: the same ones are enforced.
	c.Stop(1)
	c.Restart(1)
	c.WaitReady(time.Minute, 1)
	mine := func(i int) bool { return (i+1)%3 == 1 }
	again := inParallel(rolloutTenants, func(i int) bool {
		return mine(i) && check(1, fmt.Sprint("ro_", i)) == pb.Decision_DECISION_DENY
	})
	sameTenants(t, "after n2's restart", again, want, mine)
}

// rolloutPicks is the set the policy's rule enforces, computed here with
// the policy package from the same document.
func rolloutPicks(t *testing.T) map[int]bool {
	ps, err := policy.Parse("rollout.yaml", []byte(rolloutPolicies))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policy.Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for i := range rolloutTenants {
		res := snap.Resolve(&policy.Request{TenantID: fmt.Sprint("ro_", i)}, time.Now())
		if len(res.Applied) == 1 && res.Applied[0].Mode == policy.Hard {
			out[i] = true
		}
	}
	return out
}

// inParallel runs f for 0..n-1 on 32 goroutines and returns the i it was
// true for.
func inParallel(n int, f func(i int) bool) map[int]bool {
	var mu sync.Mutex
	out := map[int]bool{}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range next {
				if f(i) {
					mu.Lock()
					out[i] = true
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// sameTenants fails t unless got holds exactly the tenants of want that in
// selects.
func sameTenants(t *testing.T, what string, got, want map[int]bool, in func(int) bool) {
	t.Helper()
	n := 0
	for i := range want {
		if in(i) {
			n++
			if !got[i] {
				t.Errorf("%s: ro_%d is enforced by the rule but was allowed", what, i)
				return
			}
		}
	}
	if len(got) != n {
		t.Errorf("%s: %d tenants denied, want the rule's %d", what, len(got), n)
	}
}
