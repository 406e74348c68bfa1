package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func open(t *testing.T, dir string, opts Options) *WAL {
	t.Helper()
	w, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return w
}

// entry makes the entry group/index holds in these tests: its contents are
// a function of both, so a read can be checked without remembering it.
func entry(group string, index, term uint64, size int) *raft.Log {
	data := make([]byte, size+8)
	r := rand.New(rand.NewPCG(index, uint64(len(group))))
	for i := 0; i < size; i += 8 {
		binary.LittleEndian.PutUint64(data[i:], r.Uint64())
	}
	data = data[:size]
	var ext []byte
	if index%3 == 0 {
		ext = []byte(group)
	}
	return &raft.Log{Index: index, Term: term, Type: raft.LogType(index % 4), Data: data, Extensions: ext,
		AppendedAt: time.Unix(1700000000, int64(index)).UTC()}
}

func sameLog(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type && bytes.Equal(a.Data, b.Data) &&
		bytes.Equal(a.Extensions, b.Extensions) && a.AppendedAt.Equal(b.AppendedAt)
}

// checkLike asserts that log holds exactly what model holds.
func checkLike(t *testing.T, log *Log, model raft.LogStore) {
	t.Helper()
	mf, _ := model.FirstIndex()
	ml, _ := model.LastIndex()
	f, err := log.FirstIndex()
	if err != nil || f != mf {
		t.Fatalf("%s: FirstIndex = %d, %v; want %d", log.Group(), f, err, mf)
	}
	l, err := log.LastIndex()
	if err != nil || l != ml {
		t.Fatalf("%s: LastIndex = %d, %v; want %d", log.Group(), l, err, ml)
	}
	if mf > 0 {
		for _, i := range []uint64{mf - 1, ml + 1} {
			var got raft.Log
			if err := log.GetLog(i, &got); !errors.Is(err, raft.ErrLogNotFound) {
				t.Fatalf("%s: GetLog(%d) outside [%d, %d] = %v, want ErrLogNotFound", log.Group(), i, mf, ml, err)
			}
		}
	}
	for i := mf; i <= ml && mf > 0; i++ {
		var want, got raft.Log
		if err := model.GetLog(i, &want); err != nil {
			t.Fatalf("model GetLog(%d): %v", i, err)
		}
		if err := log.GetLog(i, &got); err != nil {
			t.Fatalf("%s: GetLog(%d): %v", log.Group(), i, err)
		}
		if !sameLog(&got, &want) {
			t.Fatalf("%s: entry %d = %+v, want %+v", log.Group(), i, got, want)
		}
	}
}

func TestStoreGetAcrossGroupsAndReopen(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, small)
	groups := []string{"meta", "shard-0", "shard-1"}
	models := map[string]*raft.InmemStore{}
	for gi, g := range groups {
		models[g] = raft.NewInmemStore()
		var batch []*raft.Log
		for i := uint64(1); i <= uint64(20+gi*7); i++ {
			batch = append(batch, entry(g, i, 1, int(i)*13%200))
			if len(batch) == 3 || i%5 == 0 {
				if err := w.Log(g).StoreLogs(batch); err != nil {
					t.Fatal(err)
				}
				models[g].StoreLogs(batch)
				batch = nil
			}
		}
		if len(batch) > 0 {
			w.Log(g).StoreLogs(batch)
			models[g].StoreLogs(batch)
		}
	}
	for _, g := range groups {
		checkLike(t, w.Log(g), models[g])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Log("meta").StoreLog(entry("meta", 100, 1, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("StoreLog after Close = %v, want ErrClosed", err)
	}
	w = open(t, dir, small)
	defer w.Close()
	for _, g := range groups {
		checkLike(t, w.Log(g), models[g])
	}
	// An unknown group is empty.
	checkLike(t, w.Log("shard-9"), raft.NewInmemStore())
}

// TestLikeRaftUses runs what raft does to a log store (appends, a
// conflicting suffix replaced, compaction, a restart after a snapshot
// install) in random order across groups, reopening now and then, and
// compares every entry with raft's in-memory store.
func TestLikeRaftUses(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			dir := t.TempDir()
			opts := Options{SegmentSize: 4 << 10} // many segments, so release runs
			w := open(t, dir, opts)
			defer func() { w.Close() }()
			groups := []string{"a", "b", "c"}
			models := map[string]*raft.InmemStore{}
			for _, g := range groups {
				models[g] = raft.NewInmemStore()
			}
			term := uint64(1)
			for step := 0; step < 400; step++ {
				g := groups[r.IntN(len(groups))]
				m, log := models[g], w.Log(g)
				first, _ := m.FirstIndex()
				last, _ := m.LastIndex()
				switch op := r.IntN(20); {
				case op < 12: // append
					n := 1 + r.IntN(5)
					var logs []*raft.Log
					for i := 0; i < n; i++ {
						logs = append(logs, entry(g, last+1+uint64(i), term, r.IntN(300)))
					}
					mustStore(t, log, m, logs)
				case op < 14 && last > first: // a conflicting suffix, then its replacement
					from := first + 1 + uint64(r.IntN(int(last-first)))
					mustDelete(t, log, m, from, last)
					term++
					if r.IntN(2) == 0 { // else: a crash came between the two
						mustStore(t, log, m, []*raft.Log{entry(g, from, term, r.IntN(300))})
					}
				case op < 17 && last > first: // compaction
					to := first + uint64(r.IntN(int(last-first)))
					mustDelete(t, log, m, first, to)
				case op < 18 && first > 0: // snapshot installed: delete all, restart above
					mustDelete(t, log, m, first, last)
					mustStore(t, log, m, []*raft.Log{entry(g, last+10, term, 5)})
				case op < 19:
					if err := w.Close(); err != nil {
						t.Fatal(err)
					}
					w = open(t, dir, opts)
				}
			}
			for _, g := range groups {
				checkLike(t, w.Log(g), models[g])
			}
			w.Close()
			w = open(t, dir, opts)
			for _, g := range groups {
				checkLike(t, w.Log(g), models[g])
			}
		})
	}
}

func mustStore(t *testing.T, log *Log, m *raft.InmemStore, logs []*raft.Log) {
	t.Helper()
	if err := log.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	m.StoreLogs(logs)
}

func mustDelete(t *testing.T, log *Log, m *raft.InmemStore, min, max uint64) {
	t.Helper()
	if err := log.DeleteRange(min, max); err != nil {
		t.Fatal(err)
	}
	m.DeleteRange(min, max)
}

func TestGapRestartsTheLog(t *testing.T) {
	w := open(t, t.TempDir(), small)
	defer w.Close()
	log := w.Log("g")
	for i := uint64(1); i <= 5; i++ {
		log.StoreLog(entry("g", i, 1, 10))
	}
	if err := log.StoreLog(entry("g", 50, 2, 10)); err != nil {
		t.Fatal(err)
	}
	m := raft.NewInmemStore()
	m.StoreLog(entry("g", 50, 2, 10))
	checkLike(t, log, m)
}

func TestNonConsecutiveAppendRefused(t *testing.T) {
	w := open(t, t.TempDir(), small)
	defer w.Close()
	err := w.Log("g").StoreLogs([]*raft.Log{entry("g", 1, 1, 1), entry("g", 3, 1, 1)})
	if err == nil {
		t.Fatal("StoreLogs of entries 1 and 3 succeeded")
	}
	if last, _ := w.Log("g").LastIndex(); last != 0 {
		t.Fatalf("LastIndex after a refused append = %d, want 0", last)
	}
}

func TestSegmentsReleasedAfterCompaction(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, Options{SegmentSize: 1 << 10})
	defer w.Close()
	a, b := w.Log("a"), w.Log("b")
	for i := uint64(1); i <= 100; i++ {
		a.StoreLog(entry("a", i, 1, 100))
		b.StoreLog(entry("b", i, 1, 100))
	}
	before := w.Segments()
	if before < 10 {
		t.Fatalf("%d segments after 20 KB in 1 KB segments", before)
	}
	// Compacting one group alone frees nothing: b still has entries in
	// every segment.
	a.DeleteRange(1, 95)
	if n := w.Segments(); n != before {
		t.Fatalf("segments %d -> %d with group b still in all of them", before, n)
	}
	b.DeleteRange(1, 95)
	after := w.Segments()
	if after > 3 {
		t.Fatalf("segments %d -> %d after both groups kept only 5 entries", before, after)
	}
	// On disk: those in the table, and the next one, zeroed for later.
	files, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(files) != after+1 {
		t.Fatalf("%d segment files on disk, %d in the table", len(files), after)
	}
	ma, mb := raft.NewInmemStore(), raft.NewInmemStore()
	for i := uint64(96); i <= 100; i++ {
		ma.StoreLog(entry("a", i, 1, 100))
		mb.StoreLog(entry("b", i, 1, 100))
	}
	checkLike(t, a, ma)
	checkLike(t, b, mb)
	w.Close()
	w = open(t, dir, Options{SegmentSize: 1 << 10})
	defer w.Close()
	checkLike(t, w.Log("a"), ma)
	checkLike(t, w.Log("b"), mb)
}

// TestTornTailCutAnywhere cuts the last frame at every length and flips
// each of its bytes: the entries before it survive, the torn one is gone,
// the torn bytes are cleared, and appending goes on.
func TestTornTailCutAnywhere(t *testing.T) {
	src := t.TempDir()
	w := open(t, src, small)
	m := raft.NewInmemStore()
	for i := uint64(1); i <= 4; i++ {
		mustStore(t, w.Log("g"), m, []*raft.Log{entry("g", i, 1, 40)})
	}
	seg := filepath.Join(src, segmentName(w.curID))
	good := w.curSize
	w.Log("g").StoreLog(entry("g", 5, 1, 40))
	torn := int(w.curSize - good)
	w.Close()
	full, _ := os.ReadFile(seg)

	damage := func(name string, b []byte) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, filepath.Base(seg))
			os.WriteFile(path, b, 0o644)
			w, err := Open(dir, small)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer func() { w.Close() }()
			checkLike(t, w.Log("g"), m)
			if after, _ := os.ReadFile(path); !bytes.Equal(after[:good], full[:good]) || !allZero(after[good:]) {
				t.Fatalf("segment after recovery: the %d good bytes changed or the torn ones were not cleared", good)
			}
			m2 := raft.NewInmemStore()
			for i := uint64(1); i <= 4; i++ {
				m2.StoreLog(entry("g", i, 1, 40))
			}
			mustStore(t, w.Log("g"), m2, []*raft.Log{entry("g", 5, 2, 7)})
			w.Close()
			w = open(t, dir, small)
			checkLike(t, w.Log("g"), m2)
		})
	}
	for cut := 1; cut < torn; cut++ {
		// The torn write's first cut bytes, then the zeros it did not reach
		// (or, with a file that was not zeroed, nothing).
		b := bytes.Clone(full)
		clear(b[int(good)+cut:])
		if !bytes.Equal(b, full) { // else the frame ended in zeros: nothing is torn
			damage(fmt.Sprintf("cut-%d", cut), b)
		}
		damage(fmt.Sprintf("short-%d", cut), full[:int(good)+cut])
	}
	for i := 0; i < torn; i++ {
		b := bytes.Clone(full)
		b[int(good)+i] ^= 0x40
		damage(fmt.Sprintf("flip-%d", i), b)
	}
}

func TestDamageBeforeTheLastSegmentRefused(t *testing.T) {
	dir := t.TempDir()
	w := open(t, dir, Options{SegmentSize: 256})
	for i := uint64(1); i <= 20; i++ {
		w.Log("g").StoreLog(entry("g", i, 1, 100))
	}
	w.Close()
	ids, _ := segmentIDs(dir)
	if len(ids) < 3 {
		t.Fatalf("%d segments", len(ids))
	}
	path := filepath.Join(dir, segmentName(ids[0]))
	b, _ := os.ReadFile(path)
	b[frameHeader+2] ^= 1
	os.WriteFile(path, b, 0o644)
	if _, err := Open(dir, small); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with a damaged first segment = %v, want ErrCorrupt", err)
	}
}

// TestGroupCommit: appends from many groups at once share fsyncs, and each
// caller gets its own entries back.
func TestGroupCommit(t *testing.T) {
	w := open(t, t.TempDir(), small)
	defer w.Close()
	const groups, per = 32, 40
	var wg sync.WaitGroup
	for g := 0; g < groups; g++ {
		name := fmt.Sprintf("shard-%d", g)
		wg.Go(func() {
			for i := uint64(1); i <= per; i++ {
				if err := w.Log(name).StoreLog(entry(name, i, 1, 64)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for g := 0; g < groups; g++ {
		name := fmt.Sprintf("shard-%d", g)
		m := raft.NewInmemStore()
		for i := uint64(1); i <= per; i++ {
			m.StoreLog(entry(name, i, 1, 64))
		}
		checkLike(t, w.Log(name), m)
	}
	if s := w.Syncs(); s >= groups*per {
		t.Fatalf("%d fsyncs for %d appends from %d groups at once: no group commit", s, groups*per, groups)
	}
	t.Logf("%d appends, %d fsyncs", groups*per, w.Syncs())
}

type countingObserver struct {
	mu             sync.Mutex
	records, bytes int
	calls          int
}

func (o *countingObserver) Synced(records, bytes int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.records += records
	o.bytes += bytes
	o.calls++
}

func TestObserverSeesEveryRecord(t *testing.T) {
	dir := t.TempDir()
	o := &countingObserver{}
	w := open(t, dir, Options{Observer: o, SegmentSize: small.SegmentSize})
	for i := uint64(1); i <= 10; i++ {
		w.Log("g").StoreLog(entry("g", i, 1, 10))
	}
	w.Log("g").DeleteRange(1, 3)
	w.Close()
	if o.records != 11 || int64(o.bytes) != w.curSize || uint64(o.calls) != w.Syncs() {
		t.Fatalf("observer saw %d records, %d bytes in %d calls; want 11, %d, %d", o.records, o.bytes, o.calls, w.curSize, w.Syncs())
	}
}

// small keeps the zeroed segments of tests small.
var small = Options{SegmentSize: 64 << 10}
