package clustertest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Two plans told apart by their limits; the day-long windows keep every
// count exact while the test runs.
const tenantPolicies = `policies:
  - policy_id: plan_free
    scope: { tenant_tier: FREE }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 3/24h }
  - policy_id: plan_pro
    scope: { tenant_tier: PRO }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 1000/24h }
`

// importedTenants is how many assignments the test imports: a million
// takes minutes of a loaded CI machine, so the million is measured by hand
// (README, "Plans by tenant").
const importedTenants = 100_000

// TestTenantPlans: on three real nodes, a check carrying only tenant_id is
// decided by its tenant's plan; moving the tenant to another plan with
// `quorate tenant set` changes its limit on every node (the time each took
// is logged, and must be under a second); `quorate tenant import` of a
// generated file of 100,000 assignments (in 100 chunks, so that the nodes
// snapshot their meta replicas after 64) puts each tenant on its plan on
// every node, importing it again changes nothing, and a node killed and
// restarted, restoring the snapshot, decides with the assignment.
func TestTenantPlans(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := adminClient(t, c, 0, "operator")
	if _, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: tenantPolicies}); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, clustertest.Binary(t), append(args, "--addr", c.Nodes[0].RPC, "--ca", c.Creds.CA(), "--token", c.Token("operator"))...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("quorate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	// check is a check of tenant carrying nothing but its id, on node i.
	check := func(i int, tenant string, dry bool) *pb.CheckResponse {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		defer ccancel()
		resp, err := c.Client(i).Check(cctx, &pb.CheckRequest{DryRun: dry, Descriptors: &pb.Descriptors{TenantId: tenant}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	limitOf := func(resp *pb.CheckResponse) string {
		if len(resp.GetPolicies()) == 0 {
			return resp.GetReason().String()
		}
		return fmt.Sprintf("%s %d", resp.GetAppliedPolicyId(), resp.GetPolicies()[0].GetLimit())
	}

	// A limiter embedded in a gateway resolves plans from the assignment
	// as the nodes do: it follows the assignment through its Watch.
	gw, err := client.NewEmbedded(ctx, dialGateway(t, c, "gateway"), client.EmbeddedConfig{Holder: "gw-plans"})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	gwLimit := func(tenant string) string {
		ans, err := gw.Check(ctx, &decide.Request{DryRun: true, Descriptors: &decide.Descriptors{TenantID: tenant}})
		if err != nil {
			return err.Error()
		}
		if len(ans.Policies) == 0 {
			return ans.Reason.String()
		}
		return fmt.Sprintf("%s %d", ans.AppliedPolicyID, ans.Policies[0].Limit)
	}
	gwDecides := func(tenant, want string) {
		t.Helper()
		await.UntilEvery(t, 10*time.Second, time.Millisecond, func() error {
			if got := gwLimit(tenant); got != want {
				return fmt.Errorf("the gateway decides %s with %s, want %s", tenant, got, want)
			}
			return nil
		})
	}

	out := cli("tenant", "set", "t_1", "--plan", "FREE")
	if !strings.Contains(out, "t_1: now on plan FREE") || strings.Count(out, " after ") != 3 {
		t.Fatalf("tenant set: %s", out)
	}
	for i := range 4 {
		resp := check(i%3, "t_1", false)
		if got := limitOf(resp); got != "plan_free 3" || (resp.GetDecision() == pb.Decision_DECISION_ALLOW) != (i < 3) {
			t.Fatalf("check %d of t_1 on FREE, on n%d: %s by %s", i+1, i%3+1, resp.GetDecision(), got)
		}
	}

	cli("tenant", "set", "t_1", "--plan", "plan_pro", "--wait=false")
	acked := time.Now()
	var worst time.Duration
	for i := range c.Nodes {
		// Polled every millisecond with dry runs: the time until each node
		// decides with PRO's limit is what is measured.
		await.UntilEvery(t, 10*time.Second, time.Millisecond, func() error {
			if got := limitOf(check(i, "t_1", true)); got != "plan_pro 1000" {
				return fmt.Errorf("n%d still decides t_1 with %s", i+1, got)
			}
			return nil
		})
		took := time.Since(acked)
		worst = max(worst, took)
		t.Logf("n%d decides t_1 with plan_pro %v after the move was acknowledged", i+1, took)
	}
	gwDecides("t_1", "plan_pro 1000")
	t.Logf("the gateway decides t_1 with plan_pro %v after the move was acknowledged", time.Since(acked))
	if worst > time.Second {
		t.Errorf("moving a tenant took %v to reach every node; the target is a second", worst)
	}
	if resp := check(1, "t_1", false); resp.GetDecision() != pb.Decision_DECISION_ALLOW {
		t.Errorf("t_1 on PRO: %s", resp.GetDecision())
	}
	ex, err := admin.Explain(ctx, &pb.ExplainRequest{Descriptors: &pb.Descriptors{TenantId: "t_1"}})
	if err != nil || ex.GetTier() != "tenant_tier PRO from the tenant assignment (plan plan_pro)" {
		t.Errorf("explain: %q %v", ex.GetTier(), err)
	}

	file := filepath.Join(t.TempDir(), "tenants.csv")
	var b strings.Builder
	b.WriteString("tenant_id,plan\n")
	for i := range importedTenants {
		fmt.Fprintf(&b, "tn_%06d,%s\n", i, []string{"FREE", "PRO"}[i%2])
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out = cli("tenant", "import", file, "--chunk", "1000")
	t.Logf("tenant import of %d assignments (%d bytes), live everywhere, in %v:\n%s", importedTenants, b.Len(), time.Since(start), out)
	if !strings.Contains(out, fmt.Sprintf("imported %d assignments", importedTenants)) || strings.Count(out, " after ") != 3 {
		t.Fatalf("import: %s", out)
	}
	samples := map[string]string{"tn_000000": "plan_free 3", "tn_000001": "plan_pro 1000", "tn_049999": "plan_pro 1000", "tn_099998": "plan_free 3", "t_1": "plan_pro 1000"}
	for i := range c.Nodes {
		for id, want := range samples {
			if got := limitOf(check(i, id, true)); got != want {
				t.Errorf("n%d: %s decided by %s; want %s", i+1, id, got, want)
			}
		}
	}
	for id, want := range samples {
		gwDecides(id, want) // the import's chunks reach it as deltas, or whole
	}
	held, err := admin.ListTenants(ctx, &pb.ListTenantsRequest{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the gateway to hold the cluster's assignment version", func() bool {
		return gw.Policies().Tenants().Version() == held.GetVersion() && gw.Policies().Tenants().Len() == importedTenants+1
	})
	if out := cli("tenant", "import", file, "--wait=false"); !strings.Contains(out, fmt.Sprintf("0 set, %d unchanged", importedTenants)) {
		t.Errorf("the same file again: %s", out)
	}
	list, err := admin.ListTenants(ctx, &pb.ListTenantsRequest{Limit: 2, Plan: "FREE"})
	if err != nil || list.GetTenants() != importedTenants+1 || list.GetPlans()["FREE"] != importedTenants/2 || list.GetNext() != "tn_000002" {
		t.Errorf("list: %d tenants, plans %v, next %q (%v)", list.GetTenants(), list.GetPlans(), list.GetNext(), err)
	}

	await.True(t, 10*time.Second, "n3 to snapshot its meta replica after 64 tenant changes", func() bool {
		snaps, _ := filepath.Glob(filepath.Join(c.Nodes[2].Data, "shards", "meta", "snapshots", "*", "state.bin"))
		return len(snaps) > 0
	})
	c.Kill(2)
	c.Restart(2)
	c.WaitReady(30*time.Second, 2)
	for id, want := range samples {
		if got := limitOf(check(2, id, true)); got != want {
			t.Errorf("n3 after a restart: %s decided by %s; want %s", id, got, want)
		}
	}
}
