package clustertest_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// failOpen is a strict item whose shard's failure allows it.
func failOpen(name, key string, limit int64, period time.Duration) *pb.Item {
	it := clustertest.Item(name, key, limit, period)
	it.Fail = pb.FailMode_FAIL_MODE_OPEN
	return it
}

// sameShard returns an item of name on shard s, trying keys until one maps
// there (each try consumes one unit of a key of its own).
func sameShard(t *testing.T, c *clustertest.Cluster, name string, s int) *pb.Item {
	t.Helper()
	for i := range 1000 {
		it := failOpen(name, fmt.Sprintf("%s-%d", name, i), 1_000_000, time.Hour)
		if keyShard(t, c, it) == s {
			return it
		}
	}
	t.Fatalf("no key of %s on shard %d in 1000 tries", name, s)
	return nil
}

// TestDeadlineAttackLeavesVictimDenied: an attacker sends checks with a 1ms
// deadline every 10ms and checks it cancels after 300µs, on its own key of
// the victim's shard, at every node. The victim's key (10 per hour, fail
// open) is exhausted: every one of its checks meanwhile is denied, none is
// answered from the fail mode. (A breaker that counted the attacker's
// deadlines opened the shard's breaker and let the victim through.)
func TestDeadlineAttackLeavesVictimDenied(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	victim := failOpen("api", "victim", 10, time.Hour)
	s := keyShard(t, c, victim) // one of the 10
	for range 9 {
		if resp, err := check(t, c, 0, victim); err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("exhausting the victim's key: %v %v", resp, err)
		}
	}
	attacker := sameShard(t, c, "attacker", s)

	stop := make(chan struct{})
	var attacks, attackErrs atomic.Int64
	var wg sync.WaitGroup
	attack := func(node int, every time.Duration, cut func(context.Context) (context.Context, context.CancelFunc)) {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ctx, cancel := cut(context.Background())
			_, err := c.Client(node).Check(ctx, &pb.CheckRequest{Items: []*pb.Item{attacker}})
			cancel()
			attacks.Add(1)
			if err != nil {
				attackErrs.Add(1)
			}
		}
	}
	for node := range 3 {
		wg.Add(2)
		go attack(node, 10*time.Millisecond, func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Millisecond)
		})
		go attack(node, 2*time.Millisecond, func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(300*time.Microsecond, cancel)
			return ctx, cancel
		})
	}

	var allowed, failModes, denied, errs int
	// Checks for 4s under the attack: the interval judged.
	end := time.Now().Add(4 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		resp, err := check(t, c, i%3, victim)
		switch {
		case err != nil:
			errs++
		case resp.GetDecision() == pb.Decision_DECISION_ALLOW:
			allowed++
			if resp.GetResults()[0].GetReason() == pb.Reason_REASON_FAIL_OPEN {
				failModes++
			}
		case resp.GetResults()[0].GetReason() == pb.Reason_REASON_OVER_LIMIT:
			denied++
		default:
			failModes++
		}
		time.Sleep(2 * time.Millisecond) // the client's pace
	}
	close(stop)
	wg.Wait()
	t.Logf("attacker: %d checks, %d ended by their deadline or cancellation; victim: %d denied, %d allowed, %d fail-mode answers, %d errors",
		attacks.Load(), attackErrs.Load(), denied, allowed, failModes, errs)
	if attackErrs.Load() < 100 {
		t.Fatalf("only %d attacking checks failed: the attack did not run", attackErrs.Load())
	}
	if allowed != 0 || failModes != 0 || errs != 0 || denied < 20 {
		t.Fatalf("victim: %d allowed, %d fail-mode answers, %d errors, %d denied; want every check denied", allowed, failModes, errs, denied)
	}
}

// TestFailModeBeforeCallerDeadline: a caller with a 2s deadline (the CLI's
// default) checking a shard that has lost its quorum gets its fail mode's
// answer after about the node's 1s check timeout, not DEADLINE_EXCEEDED
// after 2s.
func TestFailModeBeforeCallerDeadline(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{})
	closed := clustertest.Item("api", "reserve-closed", 100, time.Hour)
	open := failOpen("api", "reserve-open", 100, time.Hour)
	if _, err := check(t, c, 0, closed); err != nil {
		t.Fatal(err)
	}
	c.Kill(1)
	c.Kill(2)
	for _, tc := range []struct {
		item   *pb.Item
		reason pb.Reason
	}{{closed, pb.Reason_REASON_UNAVAILABLE}, {open, pb.Reason_REASON_FAIL_OPEN}, {closed, pb.Reason_REASON_UNAVAILABLE}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		start := time.Now()
		resp, err := c.Client(0).Check(ctx, &pb.CheckRequest{Items: []*pb.Item{tc.item}})
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("%s after %s: %v (%s), want the fail mode's answer", tc.item.GetKey(), took, err, status.Code(err))
		}
		if r := resp.GetResults()[0].GetReason(); r != tc.reason || took > 1500*time.Millisecond {
			t.Fatalf("%s: %s after %s, want %s within about the 1s check timeout", tc.item.GetKey(), r, took, tc.reason)
		}
		t.Logf("%s: %s after %s", tc.item.GetKey(), resp.GetResults()[0].GetReason(), took.Round(time.Millisecond))
	}
}
