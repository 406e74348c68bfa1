package shard

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/rpc/raftgrpc"
)

// queueObserver counts the Submits that found the queue full.
type queueObserver struct{ waited, shed atomic.Int64 }

func (o *queueObserver) Batch(int, time.Duration) {}

func (o *queueObserver) QueueFull(shed bool) {
	if shed {
		o.shed.Add(1)
	} else {
		o.waited.Add(1)
	}
}

// soloShard opens a one-replica shard (its own gRPC Raft transport on
// loopback, its log on disk) configured by cfg, and waits until it leads.
func soloShard(t *testing.T, cfg Config) *Shard {
	t.Helper()
	lis := listen(t, "127.0.0.1:0")
	srv := grpc.NewServer()
	mgr := raftgrpc.NewManager(raft.ServerAddress(lis.Addr().String()))
	mgr.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	trans, err := mgr.Transport("shard-0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.GroupConfig = GroupConfig{ID: "shard-0", NodeID: "n0", Dir: t.TempDir(), Transport: trans,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error})}
	sh, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sh.Close()
		mgr.Close()
		srv.Stop()
	})
	if err := sh.Bootstrap([]raft.Server{{ID: "n0", Address: raft.ServerAddress(lis.Addr().String())}}); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the single replica to become leader", sh.IsLeader)
	return sh
}

// TestQueueFullIsCountedAndShed: with a queue of one request and one
// command in flight, concurrent Submits with short deadlines find the
// queue full. Those that got a place later are counted as having waited;
// those whose deadline ended first are shed: counted, never enqueued, and
// answered with their context's error (not an unknown outcome).
func TestQueueFullIsCountedAndShed(t *testing.T) {
	obs := &queueObserver{}
	sh := soloShard(t, Config{BatchMax: 1, QueueLen: 1, MaxInflight: 1, Observer: obs})
	var shed, ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+i%20)*time.Millisecond)
			defer cancel()
			_, err := sh.Submit(ctx, take("k"), false)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrOutcomeUnknown):
			case errors.Is(err, context.DeadlineExceeded):
				shed.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	t.Logf("%d applied, %d shed; the observer heard of %d waits and %d sheds", ok.Load(), shed.Load(), obs.waited.Load(), obs.shed.Load())
	if shed.Load() == 0 || obs.waited.Load() == 0 {
		t.Fatalf("%d shed, %d waited: the queue of one never filled", shed.Load(), obs.waited.Load())
	}
	if obs.shed.Load() != shed.Load() {
		t.Fatalf("observer counted %d sheds, Submit returned %d", obs.shed.Load(), shed.Load())
	}
}

// TestBatcherCarriesRequestTooBigToJoin: a request too big for the batch
// being gathered starts the next one. Putting it back into a full queue
// blocked the batcher for good once Submits had filled the place it left.
func TestBatcherCarriesRequestTooBigToJoin(t *testing.T) {
	sh := soloShard(t, Config{BatchMax: 4, QueueLen: 1, MaxInflight: 1})
	three := []fsm.Op{take("a")[0], take("b")[0], take("c")[0]}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 100 {
		wg.Go(func() {
			if _, err := sh.Submit(ctx, three, false); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of 100 submits of 3 ops (batches of 4) failed: the batcher stalled", failed.Load())
	}
}

// A request of exactly BatchMax operations is taken (and decided); one more
// is refused before it is queued.
func TestSubmitAtTheBatchLimit(t *testing.T) {
	sh := soloShard(t, Config{BatchMax: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	three := []fsm.Op{take("a")[0], take("b")[0], take("c")[0]}
	a, err := sh.Submit(ctx, three, false)
	if err != nil || len(a.Results) != 3 {
		t.Fatalf("%d operations at a limit of 3: %v, %d results", len(three), err, len(a.Results))
	}
	if _, err := sh.Submit(ctx, append(three, take("d")[0]), false); err == nil || !strings.Contains(err.Error(), "exceed the batch limit 3") {
		t.Fatalf("4 operations at a limit of 3: %v, want the batch limit error", err)
	}
}

// sizesObserver records the operations of each committed entry.
type sizesObserver struct {
	mu    sync.Mutex
	sizes []int
}

func (o *sizesObserver) Batch(ops int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sizes = append(o.sizes, ops)
}

// Under load a batch fills up to BatchMax operations and never past it.
func TestBatchesFillToBatchMax(t *testing.T) {
	obs := &sizesObserver{}
	sh := soloShard(t, Config{BatchMax: 4, MaxInflight: 1, BatchWait: 20 * time.Millisecond, Observer: obs})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			if _, err := sh.Submit(ctx, take(fmt.Sprint("k", i)), false); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	full := 0
	for _, n := range obs.sizes {
		if n > 4 {
			t.Fatalf("an entry of %d operations, over BatchMax 4 (entries %v)", n, obs.sizes)
		}
		if n == 4 {
			full++
		}
	}
	if full == 0 {
		t.Errorf("no entry reached BatchMax 4 under 64 concurrent requests: %v", obs.sizes)
	}
}
