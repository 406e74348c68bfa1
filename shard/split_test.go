package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
)

// openSingle opens (or reopens, from dir) a one-replica shard and waits
// until it leads.
func openSingle(t *testing.T, id, dir string) *Shard {
	t.Helper()
	addr := raft.ServerAddress(id)
	_, trans := raft.NewInmemTransport(addr)
	sh, err := Open(Config{GroupConfig: GroupConfig{ID: id, NodeID: "n0", Dir: dir, Transport: trans,
		Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error})}})
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Bootstrap([]raft.Server{{ID: "n0", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, sh)
	return sh
}

func submit(t *testing.T, sh *Shard, ops []fsm.Op) []fsm.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := sh.Submit(ctx, ops, false)
	if err != nil {
		t.Fatal(err)
	}
	return a.Results
}

func control(t *testing.T, sh *Shard, c *fsm.Control) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := sh.Control(ctx, c)
	return err
}

// TestShardSplit splits a real group: the parent fences the upper half of
// the hash space through its log, the child adopts the exported chunks
// through its own, and each then serves its half, refusing the other with
// ErrMoved; the parent's split state survives a restart (log replay).
func TestShardSplit(t *testing.T) {
	pdir := t.TempDir()
	parent := openSingle(t, "parent", pdir)
	child := openSingle(t, "child", t.TempDir())
	defer child.Close()
	keep, move := fsm.Range{Lo: 0, Hi: 1<<63 - 1}, fsm.Range{Lo: 1 << 63, Hi: math.MaxUint64}

	var keys []string
	for i := range 60 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	for range 3 {
		for _, k := range keys {
			if r := submit(t, parent, take(k))[0]; !r.Allowed {
				t.Fatalf("take %s: %+v", k, r)
			}
		}
	}
	// Readers beside the applies of every control: the race detector
	// checks the lock.
	stop, done := make(chan struct{}), make(chan struct{})
	go func(parent *Shard) {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = parent.SplitInfo(), child.SplitInfo()
			_, _, _ = parent.ExportChunk(0)
			time.Sleep(time.Millisecond) // reads spread over the split, under test
		}
	}(parent)
	fence := &fsm.Control{Kind: fsm.CtlFence, Keep: keep, Move: move}
	for range 2 { // the second is a no-op
		if err := control(t, parent, fence); err != nil {
			t.Fatal(err)
		}
	}
	if info := parent.SplitInfo(); info.Owned != keep || info.Frozen != move {
		t.Fatalf("parent after the fence: %+v", info)
	}
	for seq := uint64(0); ; seq++ {
		chunk, last, err := parent.ExportChunk(seq)
		if err != nil {
			t.Fatal(err)
		}
		if err := control(t, child, &fsm.Control{Kind: fsm.CtlAdopt, Keep: move, Seq: seq, Last: last, Chunk: chunk}); err != nil {
			t.Fatal(err)
		}
		if last {
			break
		}
	}
	if info := child.SplitInfo(); info.Owned != move || info.Loading {
		t.Fatalf("child after adoption: %+v", info)
	}
	if err := control(t, child, &fsm.Control{Kind: fsm.CtlAdopt, Keep: move, Seq: 9}); !errors.Is(err, fsm.ErrSplit) {
		t.Fatalf("chunk out of order: %v, want ErrSplit", err)
	}
	check := func(parent *Shard) {
		t.Helper()
		for _, k := range keys {
			serving, other := parent, child
			if move.Contains(xxhash.Sum64String(k)) {
				serving, other = child, parent
			}
			if r := submit(t, serving, take(k))[0]; !r.Allowed || r.Remaining != 100-4 {
				t.Fatalf("take %s at its group: %+v, want 96 left (3 taken before the split)", k, r)
			}
			if r := submit(t, serving, []fsm.Op{{Kind: fsm.OpRefund, Key: k, Limit: limit100, Cost: 1}})[0]; r.Err != nil {
				t.Fatalf("refund %s: %+v", k, r)
			}
			if r := submit(t, other, take(k))[0]; !errors.Is(r.Err, fsm.ErrMoved) {
				t.Fatalf("take %s at the other group: %+v, want ErrMoved", k, r)
			}
		}
	}
	check(parent)
	// The frozen copy goes into a snapshot; the release after it is
	// replayed from the log at the restart.
	if err := parent.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}

	release := &fsm.Control{Kind: fsm.CtlRelease, Move: move}
	if err := control(t, parent, release); err != nil {
		t.Fatal(err)
	}
	if info := parent.SplitInfo(); !info.Frozen.IsZero() {
		t.Fatalf("parent after release: %+v", info)
	}
	if _, _, err := parent.ExportChunk(0); err == nil {
		t.Fatal("export after release")
	}
	close(stop)
	<-done
	if err := parent.Close(); err != nil {
		t.Fatal(err)
	}
	parent = openSingle(t, "parent", pdir)
	defer parent.Close()
	if err := parent.Raft().Barrier(5 * time.Second).Error(); err != nil { // the log replayed
		t.Fatal(err)
	}
	if info := parent.SplitInfo(); info.Owned != keep || !info.Frozen.IsZero() {
		t.Fatalf("parent after restart: %+v", info)
	}
	check(parent)
}

func TestMachineFSMAppliesControls(t *testing.T) {
	a := &machineFSM{m: fsm.New(fsm.Config{})}
	fence := fsm.AppendControl(nil, &fsm.Control{Kind: fsm.CtlFence, Keep: fsm.Range{Lo: 0, Hi: 9}, Move: fsm.Range{Lo: 10, Hi: math.MaxUint64}})
	out := a.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: fence},
		{Index: 2, Type: raft.LogCommand, Data: fence[:10]},
		{Index: 3, Type: raft.LogCommand, Data: fsm.AppendControl(nil, &fsm.Control{Kind: fsm.CtlRelease, Move: fsm.Range{Lo: 1, Hi: 2}})},
		{Index: 4, Type: raft.LogCommand, Data: fsm.AppendCommand(nil, &fsm.Command{Now: 1, Ops: take("k")})},
	})
	if r := out[0].(*applied); r.err != nil || r.index != 1 {
		t.Fatalf("fence: %+v", r)
	}
	if r := out[1].(*applied); !errors.Is(r.err, fsm.ErrCorrupt) {
		t.Fatalf("truncated control: %+v", r)
	}
	if r := out[2].(*applied); !errors.Is(r.err, fsm.ErrSplit) {
		t.Fatalf("release of another range: %+v", r)
	}
	if r := out[3].(*applied); r.err != nil || !errors.Is(r.results[0].Err, fsm.ErrMoved) {
		t.Fatalf("take after the fence: %+v", r)
	}
	if info := a.split(); info.Owned != (fsm.Range{Lo: 0, Hi: 9}) {
		t.Fatalf("split state %+v", info)
	}
}
