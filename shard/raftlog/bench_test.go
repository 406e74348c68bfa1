package raftlog

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// BenchmarkStoreLogs appends one 200-byte entry per operation, durably,
// from 1 or 16 groups at once, to the shared WAL and, as the baseline, to
// raft-boltdb (one store per group, as groups used before this package).
func BenchmarkStoreLogs(b *testing.B) {
	for _, groups := range []int{1, 16} {
		b.Run(fmt.Sprintf("wal/groups=%d", groups), func(b *testing.B) {
			w, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			stores := make([]raft.LogStore, groups)
			for g := range stores {
				stores[g] = w.Log(fmt.Sprint("shard-", g))
			}
			benchStores(b, stores)
		})
		b.Run(fmt.Sprintf("bolt/groups=%d", groups), func(b *testing.B) {
			dir := b.TempDir()
			stores := make([]raft.LogStore, groups)
			for g := range stores {
				s, err := raftboltdb.NewBoltStore(filepath.Join(dir, fmt.Sprint("shard-", g, ".db")))
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				stores[g] = s
			}
			benchStores(b, stores)
		})
	}
}

// benchStores has one goroutine per store append b.N entries between them.
func benchStores(b *testing.B, stores []raft.LogStore) {
	data := make([]byte, 200)
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, s := range stores {
		wg.Go(func() {
			for i := uint64(1); next.Add(1) <= int64(b.N); i++ {
				if err := s.StoreLog(&raft.Log{Index: i, Term: 1, Data: data}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
