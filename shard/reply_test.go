package shard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
)

// TestBatchRepliesMatchTheirRequests submits many distinct requests at once
// to a one-replica shard on disk, with a pipeline of one proposal so that
// requests pile up into shared entries. Every op has a key, limit and cost
// of its own, so its result (capacity and remaining) is one only that op
// could produce: a batcher that hands a request another request's slice of
// the results, or numbers the all-or-nothing groups wrongly, fails here
// even though every op is applied.
func TestBatchRepliesMatchTheirRequests(t *testing.T) {
	obs := &countingObserver{}
	sh := openOne(t, Config{MaxInflight: 1, BatchWait: 2 * time.Millisecond, Observer: obs})
	const clients, rounds = 48, 8
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for r := range rounds {
				if err := submitDistinct(sh, r*clients+c); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	reqs := int64(clients * rounds)
	if b := obs.batches.Load(); b == 0 || b > reqs/2 {
		t.Fatalf("%d requests took %d entries: too few shared an entry to test reply matching", reqs, b)
	}
	t.Logf("%d requests (%d ops) in %d entries", reqs, obs.ops.Load(), obs.batches.Load())
}

// submitDistinct sends request id: 1 to 3 takes on fresh keys, each with a
// capacity and cost no other op has. Odd requests are atomic; every
// fourth ends with a take of its first key's whole capacity, which the
// first take leaves short: the request is denied and its other takes come
// back refunded, leaving the requests around it (atomic or not) untouched.
func submitDistinct(sh *Shard, id int) error {
	n := 1 + id%3
	atomic, deny := id%2 == 1, id%4 == 3
	ops := make([]fsm.Op, n)
	for i := range ops {
		limit := int64(1_000_000 + id*8 + i)
		ops[i] = fsm.Op{Kind: fsm.OpTake, Key: fmt.Sprintf("req-%d-%d", id, i), Cost: int64(1 + id*5 + i*3),
			Limit: fsm.Limit{Algorithm: fsm.TokenBucket, Limit: limit, Period: time.Hour}}
	}
	if deny {
		ops = append(ops, fsm.Op{Kind: fsm.OpTake, Key: ops[0].Key, Limit: ops[0].Limit, Cost: ops[0].Limit.Limit})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := sh.Submit(ctx, ops, atomic)
	if err != nil {
		return fmt.Errorf("request %d: %w", id, err)
	}
	if len(a.Results) != len(ops) {
		return fmt.Errorf("request %d: %d results for %d ops", id, len(a.Results), len(ops))
	}
	for i, res := range a.Results {
		op := ops[i]
		want := outcome{allowed: true, limit: op.Limit.Limit, remaining: op.Limit.Limit - op.Cost}
		switch {
		case deny && i == n:
			want = outcome{limit: op.Limit.Limit, remaining: op.Limit.Limit - ops[0].Cost}
		case deny:
			want = outcome{allowed: true, refunded: true, limit: op.Limit.Limit, remaining: op.Limit.Limit}
		}
		got := outcome{res.Allowed, res.Refunded, res.Limit, res.Remaining, res.Err}
		if got != want {
			return fmt.Errorf("request %d op %d (limit %d, cost %d): got %+v, want %+v: not this request's own result",
				id, i, op.Limit.Limit, op.Cost, got, want)
		}
	}
	return nil
}

// outcome is the part of an fsm.Result that tells whose op it was.
type outcome struct {
	allowed, refunded bool
	limit, remaining  int64
	err               error
}

// openOne opens a bootstrapped one-replica shard in a temporary directory
// and waits until it leads.
func openOne(t *testing.T, cfg Config) *Shard {
	t.Helper()
	addr := raft.ServerAddress("n0")
	_, trans := raft.NewInmemTransport(addr)
	cfg.GroupConfig = GroupConfig{ID: "shard-0", NodeID: "n0", Dir: t.TempDir(), Transport: trans,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error})}
	sh, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Close() })
	if err := sh.Bootstrap([]raft.Server{{ID: "n0", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, sh)
	return sh
}
