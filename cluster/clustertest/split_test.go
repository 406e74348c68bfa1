package clustertest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// TestSplitUnderTraffic doubles the shard count of a running cluster
// (quorate split --all, through Admin.SplitShards) under strict and leased
// traffic: strict keys stay exact and are never reset, the leased key
// never exceeds its limit, an idempotent take made before the split is
// replayed after it by the shard its key moved to, and the new shards own
// their halves.
func TestSplitUnderTraffic(t *testing.T) {
	const shards = 4
	c := clustertest.Start(t, 3, clustertest.Options{Shards: shards})
	c.WaitReady(60*time.Second, 0, 1, 2)

	// Idempotent takes before the split, one per key: after it, the same
	// idempotency keys must replay, wherever their keys went.
	idem := make([]*pb.Item, 24)
	first := make([]int64, len(idem))
	for i := range idem {
		idem[i] = clustertest.Item("split-idem", fmt.Sprintf("i%d", i), 10, 8000*time.Hour)
		idem[i].IdempotencyKey = fmt.Sprintf("req-%d", i)
		resp, err := check(t, c, 0, idem[i])
		if err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("idempotent take %d before the split: %v %v", i, resp, err)
		}
		first[i] = resp.GetResults()[0].GetRemaining()
	}

	// Limits the load exhausts in about five seconds: keys are half spent
	// when the split begins and run out on the new shards.
	load := newMemberLoadLimit(t, c, "split", 24, 200, 0, 1, 2)
	load.run(12)
	load.awaitDecisions(24 * 200 / 5) // keys partly spent

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	start := time.Now()
	resp, err := adminClient(t, c, 1, "operator").SplitShards(ctx, &pb.SplitShardsRequest{All: true})
	cancel()
	if err != nil {
		t.Fatalf("split --all: %v", err)
	}
	if len(resp.GetSplits()) != shards {
		t.Fatalf("split --all recorded %d splits, want %d: %v", len(resp.GetSplits()), shards, resp)
	}
	done := awaitSplits(t, c, 2*shards, 60*time.Second)
	t.Logf("split %d -> %d shards: recorded in %s, every split done after %s", shards, 2*shards, time.Since(start).Round(time.Millisecond)-done, done.Round(time.Millisecond))
	waitExhausted(t, load, 30*time.Second) // the rest of each key's budget, on the new shards
	summary := load.finish()
	t.Logf("split load: %s", summary)
	// Checks a fenced parent refused waited for the new shard rather than
	// failed: none expired waiting (other failures are the machine's
	// load: elections under the race detector), and some were sent.
	sent, expired := 0.0, 0.0
	for i := range c.Nodes {
		sent += c.Metric(i, "quorate_checks_rerouted_total", `outcome="sent"`)
		expired += c.Metric(i, "quorate_checks_rerouted_total", `outcome="expired"`)
	}
	if expired > 0 || sent == 0 {
		t.Errorf("checks refused by a fenced shard: %v sent to the new shard, %v expired waiting for it; want some sent, none expired", sent, expired)
	}

	// Every idempotent take replays its first answer; some of them from a
	// new shard.
	moved := 0
	for i, it := range idem {
		resp, err := check(t, c, 2, it)
		if err != nil {
			t.Fatalf("idempotent take %d after the split: %v", i, err)
		}
		r := resp.GetResults()[0]
		if resp.GetDecision() != pb.Decision_DECISION_ALLOW || r.GetRemaining() != first[i] {
			t.Errorf("idempotent take %d after the split: %v remaining %d, first answer remaining %d: not replayed", i, resp.GetDecision(), r.GetRemaining(), first[i])
		}
		if r.GetShard() >= shards {
			moved++
		}
	}
	if moved == 0 {
		t.Errorf("none of %d keys moved to a new shard", len(idem))
	}
	// The exhausted strict keys that moved are still exhausted (finish
	// checked every one); count the ones that are on a new shard.
	onNew := 0
	for _, k := range load.keys {
		resp, err := check(t, c, 0, k)
		if err == nil && resp.GetResults()[0].GetShard() >= shards {
			onNew++
		}
	}
	if onNew == 0 {
		t.Errorf("no strict key is decided by a new shard after the split")
	}
	t.Logf("%d of %d idempotent keys and %d of %d strict keys are on the new shards; %v checks sent to the new shard, %v expired",
		moved, len(idem), onNew, len(load.keys), sent, expired)

	// Refused: a shard that does not exist.
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := adminClient(t, c, 0, "operator").SplitShards(ctx, &pb.SplitShardsRequest{Shards: []uint32{99}}); err == nil {
		t.Error("splitting shard 99 of 8 was accepted")
	}
	awaitPlacement(t, c, 3, []string{"n1", "n2", "n3"}, 60*time.Second)
}

// awaitSplits waits until node 0's record has count shards, every one of
// them routed, and no split in progress; it returns how long that took.
func awaitSplits(t *testing.T, c *clustertest.Cluster, count int, within time.Duration) time.Duration {
	t.Helper()
	return awaitSplitsAt(t, c, 0, count, within)
}

// awaitSplitsAt is awaitSplits as node i sees it.
func awaitSplitsAt(t *testing.T, c *clustertest.Cluster, i, count int, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	await.Until(t, within, func() error {
		st := statusOf(t, c, i)
		switch {
		case len(st.GetSplits()) > 0:
			return fmt.Errorf("splits not done: %d in progress", len(st.GetSplits()))
		case int(st.GetShardCount()) != count || len(st.GetRanges()) != count:
			return fmt.Errorf("splits not done: %d shards, %d routed; want %d", st.GetShardCount(), len(st.GetRanges()), count)
		}
		return nil
	})
	return time.Since(start)
}

// waitExhausted waits until every strict key of l was asked more often
// than its limit, so that finish can hold each to exactly its limit.
func waitExhausted(t *testing.T, l *memberLoad, within time.Duration) {
	t.Helper()
	err := await.Wait(within, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		short := 0
		for _, k := range l.keys {
			if l.asked[k.GetKey()] < l.limit+10 {
				short++
			}
		}
		if short > 0 {
			return fmt.Errorf("%d keys not asked past their limit", short)
		}
		return nil
	})
	if err != nil {
		t.Logf("%v", err)
	}
}

// TestSplitMetaLeaderDies kills the meta leader (kill -9) the moment the
// splits of every shard are recorded, before its mover's next tick: the
// next meta leader finds them in the record and runs them, the killed node
// comes back and follows the new ranges, and the counts stay exact. (A
// step resumed after a fence or part of a load is a no-op or continues
// where the child stands: fsm's TestSplitDecidesLikeOneGroup repeats every
// step.)
func TestSplitMetaLeaderDies(t *testing.T) {
	const shards = 4
	c := clustertest.Start(t, 3, clustertest.Options{Shards: shards})
	c.WaitReady(60*time.Second, 0, 1, 2)
	leader := -1
	for i := range 3 {
		if c.Metric(i, "quorate_group_leader", `group="meta"`) == 1 {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no node reports leading the meta group")
	}
	a, b := (leader+1)%3, (leader+2)%3
	load := newMemberLoadLimit(t, c, "splitdies", 16, 200, a, b)
	load.run(12)
	load.awaitDecisions(16 * 200 / 10) // keys partly spent

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := adminClient(t, c, a, "operator").SplitShards(ctx, &pb.SplitShardsRequest{All: true})
	cancel()
	if err != nil {
		t.Fatalf("split --all: %v", err)
	}
	c.Kill(leader)
	t.Logf("killed the meta leader %s once the splits were recorded", c.Nodes[leader].ID)
	done := awaitSplitsAt(t, c, a, 2*shards, 90*time.Second)
	t.Logf("every split done %s after the kill", done.Round(time.Millisecond))
	c.Restart(leader)
	c.WaitReady(60*time.Second, leader)
	awaitSplitsAt(t, c, leader, 2*shards, 30*time.Second) // the restarted node follows the record
	waitExhausted(t, load, 30*time.Second)
	t.Logf("load: %s", load.finish())
	awaitPlacement(t, c, 3, []string{"n1", "n2", "n3"}, 60*time.Second)
}
