package clustertest_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/browser"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

const statusPagePolicies = `policies:
  - policy_id: sp_three
    scope: { tenant_id: "sp_*" }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 3/1h }
`

// TestStatusPage loads the status page of a real three-node cluster in
// headless Chromium: it shows three nodes alive and every shard's leader,
// a policy's deny count rising after denied checks, the denied key among
// the top throttled keys, and a node killed with -9 down within seconds.
// The screenshot goes to QUORATE_UI_SCREENSHOTS when set.
func TestStatusPage(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := pb.NewAdminClient(c.Client(0).Conn())
	if _, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: statusPagePolicies, SourceName: "sp.yaml"}); err != nil {
		t.Fatal(err)
	}
	st, err := admin.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b := browser.Start(ctx, t)
	b.Open("http://" + c.Nodes[0].HTTP + "/ui/?token=" + c.Token("prometheus"))
	b.WaitCount(`#nodes tr[data-node][data-state="alive"]`, func(n int) bool { return n == 3 })
	for _, s := range st.GetShards() {
		id := strconv.Itoa(int(s.GetId()))
		b.WaitAttr(`#shards tr[data-shard="`+id+`"]`, "data-leader", func(v string) bool { return v != "" })
	}
	denied := 0
	for i := range 8 {
		resp := descCheck(t, c, i%3, &pb.Descriptors{TenantId: "sp_one"})
		if resp.GetDecision() == pb.Decision_DECISION_DENY {
			denied++
		}
	}
	if denied != 5 {
		t.Fatalf("%d of 8 denied, want 5 over a limit of 3", denied)
	}
	b.WaitAttr(`#policies tr[data-policy="sp_three"]`, "data-denied", func(v string) bool { return v == "5" })
	if mode, _ := b.Attr(`#policies tr[data-policy="sp_three"]`, "data-mode"); mode != "HARD" {
		t.Errorf("sp_three shown in mode %q, want HARD", mode)
	}
	b.WaitAttr(`#top tr[data-top-key="sp_one"]`, "data-count", func(v string) bool { return v == "5" })
	// The admin call merges the three nodes' sketches: the denials were
	// decided by the node each check reached.
	top, err := admin.TopKeys(ctx, &pb.TopKeysRequest{Policy: "sp_three"})
	if err != nil {
		t.Fatal(err)
	}
	if k := top.GetKeys(); len(k) != 1 || k[0].GetKey() != "sp_one" || k[0].GetCount() != 5 || k[0].GetError() != 0 || len(top.GetUnreachable()) != 0 {
		t.Errorf("top keys %v, want sp_one denied 5 times (exactly), every node answering", top)
	}
	if dir := os.Getenv("QUORATE_UI_SCREENSHOTS"); dir != "" {
		b.Screenshot(filepath.Join(dir, "status-cluster.png"))
	}
	killed := c.Nodes[2].ID
	c.Kill(2)
	start := time.Now()
	b.WaitAttr(`#nodes tr[data-node="`+killed+`"]`, "data-down", func(v string) bool { return v == "true" })
	t.Logf("node %s shown down %v after kill -9", killed, time.Since(start).Round(100*time.Millisecond))
	b.Screenshot(filepath.Join(t.TempDir(), "status-node-down.png"))
}
