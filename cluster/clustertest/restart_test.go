package clustertest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
)

// TestRestartedLeaderReadySoon kills (-9) the node that leads the meta
// group, keeps it down 30s, and starts it again on its data: it is ready
// again within a few seconds, and while it is not it says why. Thirty
// seconds down is what lets the survivors' retries back off far (gRPC's
// reconnect backoff, raft's backoff on appends to an unreachable
// follower): the restarted node's catch-up must not wait for either.
func TestRestartedLeaderReadySoon(t *testing.T) {
	t.Parallel() // its node is down 30s with nothing to do: TestRollout runs meanwhile
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3, ExtraArgs: []string{"--log-level", "info"}})
	lead := -1
	await.True(t, 10*time.Second, "a meta leader", func() bool {
		for i := range c.Nodes {
			if c.Metric(i, "quorate_group_leader", `group="meta"`) == 1 {
				lead = i
				return true
			}
		}
		return false
	})
	c.Kill(lead)
	// The scenario, not a wait for a state: down long enough for the
	// survivors' retries to back off far.
	time.Sleep(30 * time.Second)

	start := time.Now()
	c.Restart(lead)
	c.WaitReady(30*time.Second, lead)
	took := time.Since(start)
	t.Logf("%s ready %v after its restart", c.Nodes[lead].ID, took)
	// Waiting out the backoffs took 15s; without them a quiet machine
	// takes under 2s, and the bound leaves room for a busy one.
	if took > 10*time.Second {
		t.Errorf("%s ready %v after its restart; want a few seconds, not the survivors' backoff. Its log:\n%s", c.Nodes[lead].ID, took, c.Log(lead))
	}
	if log := c.Log(lead); !strings.Contains(log, `msg="not ready: `) {
		t.Errorf("%s never said why it was not ready:\n%s", c.Nodes[lead].ID, log)
	}
}
