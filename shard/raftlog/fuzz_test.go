package raftlog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzOpen replays arbitrary bytes as the only segment: Open either
// refuses them or yields logs whose every entry reads back, never a panic.
func FuzzOpen(f *testing.F) {
	seedDir := f.TempDir()
	w, err := Open(seedDir, small)
	if err != nil {
		f.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ {
		w.Log("g").StoreLog(entry("g", i, 1, int(i)*5))
		w.Log("h").StoreLog(entry("h", i, 2, 3))
	}
	w.Log("g").DeleteRange(1, 1)
	w.Close()
	b, _ := os.ReadFile(filepath.Join(seedDir, segmentName(1)))
	f.Add(b)
	f.Add(b[:len(b)-3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		w, err := Open(dir, small)
		if err != nil {
			return
		}
		defer w.Close()
		w.mu.RLock()
		var groups []string
		for g := range w.mu.groups {
			groups = append(groups, g)
		}
		w.mu.RUnlock()
		for _, g := range groups {
			log := w.Log(g)
			first, _ := log.FirstIndex()
			last, _ := log.LastIndex()
			for i := first; i <= last && first > 0 && i-first < 1000; i++ {
				var l raft.Log
				if err := log.GetLog(i, &l); err != nil {
					t.Fatalf("%s entry %d in [%d, %d]: %v", g, i, first, last, err)
				}
			}
		}
	})
}
