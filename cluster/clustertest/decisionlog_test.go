package clustertest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

const decisionLogPolicies = `policies:
  - policy_id: dl_twenty
    scope: { tenant_id: "dl_*" }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 20/1h }
`

// loggedDecisions reads the decision log lines node i wrote to its
// standard output: request id -> decision.
func loggedDecisions(c *clustertest.Cluster, i int) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(c.Log(i)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if k := bytes.IndexByte(line, '{'); k >= 0 {
			line = line[k:]
		}
		var r struct {
			RequestID string `json:"request_id"`
			Decision  string `json:"decision"`
			Policy    string `json:"policy"`
		}
		if json.Unmarshal(line, &r) == nil && r.RequestID != "" {
			out[r.RequestID] = r.Decision + " " + r.Policy
		}
	}
	return out
}

// TestDecisionLog: three nodes log decisions to standard output while a
// quorate bench load runs beside the test's own checks: every denied
// check appears in the log of the node that decided it, with its request
// id and deciding policy, and quorate tail follows the denials of every
// node live.
func TestDecisionLog(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4, ExtraArgs: []string{"--decision-log", "stdout", "--decision-log-allows", "0.1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := pb.NewAdminClient(c.Client(0).Conn())
	if _, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: decisionLogPolicies, SourceName: "dl.yaml"}); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, clustertest.Binary(t), args...)
		cmd.Args = append(cmd.Args, "--ca", c.Creds.CA(), "--token", c.Token("operator"))
		return cmd
	}
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.RPC)
	}
	// quorate tail, started first, follows the denials of every node.
	var tailOut bytes.Buffer
	tailCmd := cli("tail", "--addr", addrs[1], "--decision", "DENY", "--policy", "dl_twenty", "--json", "--max", "10", "--for", "90s")
	tailCmd.Stdout, tailCmd.Stderr = &tailOut, &tailOut
	if err := tailCmd.Start(); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "quorate tail follows every node", func() bool {
		return c.Metric(0, "quorate_decision_log_subscribers")+c.Metric(1, "quorate_decision_log_subscribers")+c.Metric(2, "quorate_decision_log_subscribers") == 3
	})
	bench := cli("bench", "--addrs", strings.Join(addrs, ","), "--duration", "5s", "--quiet")
	var benchOut bytes.Buffer
	bench.Stdout, bench.Stderr = &benchOut, &benchOut
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	denied := map[string]int{} // request id -> node index
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for k := range 100 {
				id := fmt.Sprintf("dl-%d-%d", w, k)
				resp, err := c.Client(w).Check(ctx, &pb.CheckRequest{RequestId: id, Descriptors: &pb.Descriptors{TenantId: "dl_a"}})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetDecision() == pb.Decision_DECISION_DENY {
					mu.Lock()
					denied[id] = w
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := bench.Wait(); err != nil {
		t.Fatalf("quorate bench: %v\n%s", err, benchOut.String())
	}
	if len(denied) != 280 {
		t.Fatalf("%d of 300 checks denied, want 280 over a limit of 20", len(denied))
	}
	await.True(t, 10*time.Second, "every denial in the decision log", func() bool {
		logs := []map[string]string{loggedDecisions(c, 0), loggedDecisions(c, 1), loggedDecisions(c, 2)}
		for id, node := range denied {
			if logs[node][id] != "DENY dl_twenty" {
				return false
			}
		}
		return true
	})
	if err := tailCmd.Wait(); err != nil {
		t.Fatalf("quorate tail: %v\n%s", err, tailOut.String())
	}
	lines := strings.Split(strings.TrimSpace(tailOut.String()), "\n")
	if len(lines) != 10 {
		t.Fatalf("quorate tail printed %d lines, want 10:\n%s", len(lines), tailOut.String())
	}
	for _, l := range lines {
		var r struct {
			Decision string `json:"decision"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Decision != "DENY" {
			t.Errorf("tail line %q: %v", l, err)
		}
	}
	if n := c.Metric(0, "quorate_decision_log_dropped_total"); n != 0 {
		t.Errorf("node 0 dropped %v records", n)
	}
}
