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
// again within a few seconds, and while it is not it says why. It used to
// take 5-25s, by chance: the survivors' Raft connections to it waited out
// gRPC's reconnect backoff (1s growing 1.6x: after 30s down, the next try
// came about 13s later) and raft's backoff on appends to a follower it had
// failed to reach (up to 10s), and its meta catch-up waited for both.
func TestRestartedLeaderReadySoon(t *testing.T) {
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
	if took > 6*time.Second {
		t.Errorf("%s ready %v after its restart; want a few seconds. Its log:\n%s", c.Nodes[lead].ID, took, c.Log(lead))
	}
	if log := c.Log(lead); !strings.Contains(log, `msg="not ready: `) {
		t.Errorf("%s never said why it was not ready:\n%s", c.Nodes[lead].ID, log)
	}
}
