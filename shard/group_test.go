package shard

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
)

func storeRange(t *testing.T, s raft.LogStore, first, last, term uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: term, Data: []byte{byte(i)}})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
}

func bounds(s raft.LogStore) [2]uint64 {
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	return [2]uint64{f, l}
}

func TestMoveLogs(t *testing.T) {
	for _, tc := range []struct {
		name           string
		from, to       [2]uint64 // ranges stored before (0: empty)
		moved          int
		wantTo         [2]uint64
		wantToTermLast uint64 // term of to's last entry afterwards
	}{
		{"nothing to move", [2]uint64{}, [2]uint64{5, 9}, 0, [2]uint64{5, 9}, 2},
		{"upgrade", [2]uint64{3, 700}, [2]uint64{}, 698, [2]uint64{3, 700}, 1},
		// A crash after the copy, before the deletion; raft appended since.
		{"stale source", [2]uint64{3, 10}, [2]uint64{3, 12}, 0, [2]uint64{3, 12}, 2},
		// A crash in the middle of the copy: start over.
		{"partial copy", [2]uint64{3, 700}, [2]uint64{3, 200}, 698, [2]uint64{3, 700}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, to := raft.NewInmemStore(), raft.NewInmemStore()
			if tc.from[0] > 0 {
				storeRange(t, from, tc.from[0], tc.from[1], 1)
			}
			if tc.to[0] > 0 {
				storeRange(t, to, tc.to[0], tc.to[1], 2)
			}
			moved, err := moveLogs(from, to)
			if err != nil || moved != tc.moved {
				t.Fatalf("moveLogs = %d, %v; want %d", moved, err, tc.moved)
			}
			if b := bounds(from); b != [2]uint64{} {
				t.Fatalf("source holds %v after the move", b)
			}
			if b := bounds(to); b != tc.wantTo {
				t.Fatalf("destination holds %v, want %v", b, tc.wantTo)
			}
			var l raft.Log
			if err := to.GetLog(tc.wantTo[1], &l); err != nil || l.Term != tc.wantToTermLast {
				t.Fatalf("last entry %+v, %v; want term %d", l, err, tc.wantToTermLast)
			}
		})
	}
}

// TestSwitchLogStoreKeepsState takes from a bucket on a one-replica group,
// reopens it with the other log store each time, and checks the takes
// survived: the entries moved (a fresh store would replay nothing).
func TestSwitchLogStoreKeepsState(t *testing.T) {
	dir := t.TempDir()
	lis := listen(t, "127.0.0.1:0")
	addr := raft.ServerAddress(lis.Addr().String())
	lis.Close()
	limit := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Hour, Burst: 10}
	for i, store := range []string{LogStoreBolt, LogStoreWAL, LogStoreBolt, LogStoreWAL} {
		_, trans := raft.NewInmemTransport(addr)
		sh, err := Open(Config{GroupConfig: GroupConfig{ID: "shard-0", NodeID: "n0", Dir: dir, Transport: trans,
			LogStore: store, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error})}})
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Bootstrap([]raft.Server{{ID: "n0", Address: addr}}); err != nil {
			t.Fatal(err)
		}
		waitLeader(t, sh)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		a, err := sh.Submit(ctx, []fsm.Op{{Kind: fsm.OpTake, Key: "k", Limit: limit, Cost: 2}}, false)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(10 - 2*(i+1)); a.Results[0].Remaining != want {
			t.Fatalf("open %d (%s): remaining %d, want %d: earlier takes were lost", i, store, a.Results[0].Remaining, want)
		}
		if err := sh.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func waitLeader(t *testing.T, sh *Shard) {
	t.Helper()
	await.True(t, 10*time.Second, "a leader", sh.IsLeader)
}

// TestBatchWaitOnlyWhenBusy: a lightly loaded shard proposes at once, even
// with a long BatchWait; a busy one (its previous batch carried several
// requests) waits and gathers.
func TestBatchWaitOnlyWhenBusy(t *testing.T) {
	lis := listen(t, "127.0.0.1:0")
	addr := raft.ServerAddress(lis.Addr().String())
	lis.Close()
	_, trans := raft.NewInmemTransport(addr)
	const wait = 3 * time.Second
	sh, err := Open(Config{BatchWait: wait, GroupConfig: GroupConfig{ID: "shard-0", NodeID: "n0", Dir: t.TempDir(),
		Transport: trans, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error})}})
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if err := sh.Bootstrap([]raft.Server{{ID: "n0", Address: addr}}); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, sh)
	limit := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1000, Period: time.Hour}
	take := func() (uint64, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
		defer cancel()
		start := time.Now()
		a, err := sh.Submit(ctx, []fsm.Op{{Kind: fsm.OpTake, Key: "k", Limit: limit, Cost: 1}}, false)
		if err != nil {
			t.Fatal(err)
		}
		return a.Index, time.Since(start)
	}
	for range 3 {
		if _, d := take(); d >= wait {
			t.Fatalf("a lone request on an idle shard took %v: it waited for company", d)
		}
	}
	// Many at once: the first batch goes alone or with a few; once a batch
	// carried several, the next one waits and gathers the rest into one
	// entry.
	const n = 40
	idx := make(chan uint64, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { i, _ := take(); idx <- i })
	}
	wg.Wait()
	close(idx)
	entries := map[uint64]bool{}
	for i := range idx {
		entries[i] = true
	}
	if len(entries) > n/2 {
		t.Fatalf("%d concurrent requests took %d entries: no gathering", n, len(entries))
	}
	t.Logf("%d concurrent requests in %d entries", n, len(entries))
}
