package clustertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// rollbackPolicy is policy x at a limit: a day's fixed window, so that
// nothing refills while the test runs.
func rollbackPolicy(limit int) string {
	return fmt.Sprintf("policies:\n  - policy_id: x\n    scope: { tenant_tier: ROLL }\n    key: [tenant_id]\n    algorithm: FIXED_WINDOW\n    config: { limit: %d/24h }\n", limit)
}

// allowedOf sends n checks of a fresh tenant to node i and counts the
// allowed ones, which must come first.
func allowedOf(t *testing.T, c *clustertest.Cluster, i, n int, tenant string) int {
	t.Helper()
	allowed := 0
	for k := range n {
		r := descCheck(t, c, i, &pb.Descriptors{TenantId: tenant, TenantTier: "ROLL"})
		if r.GetDecision() != pb.Decision_DECISION_ALLOW {
			continue
		}
		if allowed != k {
			t.Fatalf("n%d, %s: check %d allowed after a denial: %v", i+1, tenant, k+1, r)
		}
		allowed++
	}
	return allowed
}

// TestPolicyHistoryRollback: on three real nodes, through the CLI: apply
// v1 (x at 5 a day) and v2 (x at 50), roll back to v1: every node allows
// exactly 5 on a fresh key again, the rollback is a new version in the
// history, diff v1 v2 shows the limit, diff v1 and the rollback shows
// nothing, and all of it survives a node's kill -9 and restart.
func TestPolicyHistoryRollback(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli := func(i int, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, clustertest.Binary(t), args...)
		cmd.Args = append(cmd.Args, "--addr", c.Nodes[i].RPC, "--ca", c.Creds.CA(), "--token", c.Token("operator"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("quorate %s on n%d: %v\n%s", strings.Join(args, " "), i+1, err, out)
		}
		return string(out)
	}
	apply := func(i, limit int) uint64 {
		t.Helper()
		file := filepath.Join(t.TempDir(), fmt.Sprintf("x%d.yaml", limit))
		if err := os.WriteFile(file, []byte(rollbackPolicy(limit)), 0o600); err != nil {
			t.Fatal(err)
		}
		var v uint64
		out := cli(i, "policy", "apply", "-f", file)
		_, rest, _ := strings.Cut(out, "applied version ")
		if _, err := fmt.Sscanf(rest, "%d", &v); err != nil || !strings.Contains(out, "live on") {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		return v
	}

	v1 := apply(0, 5)
	v2 := apply(1, 50)
	if got := allowedOf(t, c, 2, 6, "t_v2"); got != 6 {
		t.Fatalf("at v2 (50 a day) a fresh tenant got %d of 6 checks; want all 6", got)
	}

	out := cli(2, "policy", "rollback", "--to", fmt.Sprint(v1), "--dry-run")
	if !strings.Contains(out, "~ x: config.limit 50/24h -> 5/24h\ndry run: nothing applied") {
		t.Fatalf("rollback --dry-run:\n%s", out)
	}
	out = cli(2, "policy", "rollback", "--to", fmt.Sprint(v1))
	v3 := v2 + 1
	if !strings.Contains(out, fmt.Sprintf("~ x: config.limit 50/24h -> 5/24h\napplied version %d\nlive on n1 after", v3)) {
		t.Fatalf("rollback --to %d:\n%s", v1, out)
	}
	awaitVersion(t, c, v3, 5*time.Second)
	for i := range c.Nodes {
		if got := allowedOf(t, c, i, 7, fmt.Sprintf("t_rb%d", i)); got != 5 {
			t.Errorf("after the rollback n%d allowed %d of 7 checks of a fresh tenant; want exactly 5, v1's limit", i+1, got)
		}
	}

	checkHistory := func(i int) {
		t.Helper()
		var h struct {
			Version  uint64 `json:"version"`
			Versions []struct {
				Version    uint64  `json:"version"`
				Time       *string `json:"time"`
				Who        string  `json:"who"`
				Op         string  `json:"op"`
				Source     string  `json:"source"`
				RollbackTo uint64  `json:"rollback_to"`
				Changed    struct {
					IDs []string `json:"ids"`
				} `json:"changed"`
			} `json:"versions"`
		}
		out := cli(i, "policy", "history", "--json")
		if err := json.Unmarshal([]byte(out), &h); err != nil || h.Version != v3 || len(h.Versions) != 3 {
			t.Fatalf("history on n%d: %v\n%s", i+1, err, out)
		}
		rb, first := h.Versions[0], h.Versions[2]
		if rb.Version != v3 || rb.Op != "rollback" || rb.RollbackTo != v1 || rb.Who != "operator" || rb.Time == nil ||
			len(rb.Changed.IDs) != 1 || rb.Changed.IDs[0] != "x" {
			t.Errorf("history on n%d: newest %+v; want the rollback to %d by operator, changing x", i+1, rb, v1)
		}
		if first.Version != v1 || first.Op != "apply" || !strings.HasSuffix(first.Source, "x5.yaml") {
			t.Errorf("history on n%d: oldest %+v; want v1, applied from x5.yaml", i+1, first)
		}
		if d := cli(i, "policy", "diff", fmt.Sprint(v1), fmt.Sprint(v2)); d != "~ x: config.limit 5/24h -> 50/24h\n" {
			t.Errorf("diff v1 v2 on n%d: %q", i+1, d)
		}
		if d := cli(i, "policy", "diff", fmt.Sprint(v1), fmt.Sprint(v3)); d != fmt.Sprintf("no changes from version %d to %d\n", v1, v3) {
			t.Errorf("diff v1 and the rollback on n%d: %q; want none", i+1, d)
		}
	}
	checkHistory(0)

	t.Run("http", func(t *testing.T) {
		base := "http://" + c.Nodes[1].HTTP + "/v1/admin/policies"
		if code, body := httpDo(t, "GET", base+"/history?limit=1", c.Token("prometheus"), ""); code != http.StatusOK || !strings.Contains(body, `"op":"rollback"`) {
			t.Errorf("history with a read token: %d %s", code, body)
		}
		if code, body := httpDo(t, "GET", fmt.Sprintf("%s/history/diff?from=%d&to=%d", base, v1, v2), c.Token("prometheus"), ""); code != http.StatusOK ||
			!strings.Contains(body, `"diff":"~ x: config.limit 5/24h -> 50/24h\n"`) {
			t.Errorf("diff with a read token: %d %s", code, body)
		}
		if code, body := httpDo(t, "POST", base+"/rollback", c.Token("prometheus"), fmt.Sprintf(`{"to": %d}`, v2)); code != http.StatusForbidden {
			t.Errorf("rollback with a read token: %d %s; want 403", code, body)
		}
		code, body := httpDo(t, "POST", base+"/rollback?dry_run=true", c.Token("operator"), `{"to": 999}`)
		if code != http.StatusBadRequest || !strings.Contains(body, `"field":"to"`) || !strings.Contains(body, "policy version 999 does not exist") {
			t.Errorf("rollback to an unknown version: %d %s; want 400 naming to", code, body)
		}
	})

	// The history is replicated state: a node killed and restarted on its
	// data answers it as before, and decides with the rolled-back limit.
	c.Kill(2)
	c.Restart(2)
	c.WaitReady(60*time.Second, 2)
	checkHistory(2)
	if got := allowedOf(t, c, 2, 6, "t_restarted"); got != 5 {
		t.Errorf("the restarted n3 allowed %d of 6 checks of a fresh tenant; want 5", got)
	}
}
