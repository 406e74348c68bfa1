package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// rebuilt is the index built afresh from m's tables: what the index kept
// up to date command by command must equal.
func rebuilt(m *Machine) bucketIndex {
	c := *m
	c.rebuildIndex()
	return c.index
}

// checkIndex fails unless m's index counts exactly the keys of its tables,
// as one rebuilt from them does. A saturated counter may stand above the
// count (it is never lowered). An update forgotten where a key is added
// leaves a counter low, which would let a credit be spent on an existing
// bucket; one forgotten where a key is deleted leaves it high.
func checkIndex(t *testing.T, m *Machine, where string) {
	t.Helper()
	got, want := m.index, rebuilt(m)
	if bytes.Equal(got.counts, want.counts) && slices.Equal(got.bits, want.bits) {
		return
	}
	for p := range uint64(indexSize) {
		g, w := countAt(got, p), countAt(want, p)
		if g != w && g != indexSat {
			t.Fatalf("%s: index position %d counts %d, the tables hold %d keys there", where, p, g, w)
		}
		if set := bitAt(got, p); set != (g > 0) {
			t.Fatalf("%s: index position %d counts %d but its bit is %v", where, p, g, set)
		}
	}
}

func countAt(x bucketIndex, p uint64) byte {
	if x.counts == nil {
		return 0
	}
	return x.count(p)
}

func bitAt(x bucketIndex, p uint64) bool {
	return x.bits != nil && x.bits[p/64]&(1<<(p%64)) != 0
}

// liveBuckets is the reference for a credit's filter: the creditable
// buckets that exist at m's time, and buckets with live leases. This is
// what grants used to scan for, inside Apply.
func liveBuckets(m *Machine) []uint64 {
	var live []uint64
	for h, s := range m.tokens {
		if !tbDead(s, m.now) {
			live = append(live, h)
		}
	}
	for h, s := range m.leaky {
		if !tbDead(s, m.now) {
			live = append(live, h)
		}
	}
	for h, tat := range m.tats {
		if !tatDead(tat, m.now) {
			live = append(live, h)
		}
	}
	for h, ids := range m.byKey {
		if slices.ContainsFunc(ids, func(id uint64) bool {
			l, ok := m.leases[id]
			return ok && !leaseDead(l, m.now)
		}) {
			live = append(live, h)
		}
	}
	return live
}

// checkFilters fails unless every credit granted in rs, the results of
// cmd on a machine whose snapshot was before, carries a filter that
// contains every bucket live at the credit's place in cmd. A copy replays
// the ops before it, ungrouped: groups settle after the last op.
func checkFilters(t *testing.T, before []byte, cmd *Command, rs []Result, where string) {
	t.Helper()
	for j, r := range rs {
		if cmd.Ops[j].Kind != OpCredit || !r.Allowed {
			continue
		}
		m := New(Config{})
		if err := m.Restore(bytes.NewReader(before)); err != nil {
			t.Fatal(err)
		}
		prefix := slices.Clone(cmd.Ops[:j])
		for k := range prefix {
			prefix[k].Group = 0
		}
		m.Apply(&Command{Now: cmd.Now, Ops: prefix}, nil)
		for _, h := range liveBuckets(m) {
			if !r.Filter.MayContain(h) {
				t.Fatalf("%s: credit %d's filter leaves out live bucket %x", where, j, h)
			}
		}
	}
}

// decided is rs without credit filters, which replicas may build from
// indexes that differ in expired entries: what replicas must agree on.
func decided(rs []Result) string {
	c := slices.Clone(rs)
	for i := range c {
		c[i].Filter = Filter{}
	}
	return fmt.Sprint(c)
}

// TestIndexFollowsTables runs long random sequences of every op over
// scoped and unscoped keys, with sweeps, and checks after every command
// that the index holds exactly the keys of the tables, and that every
// credit's filter contains every live bucket.
func TestIndexFollowsTables(t *testing.T) {
	for seed := range raceScaled(8) {
		r := rand.New(rand.NewPCG(seed, 31))
		m := New(Config{})
		var leases []uint64
		for i, now := range randomTimes(r, 1500, 250*time.Millisecond) {
			cmd := scopedCommand(r, now, leases)
			if i%2 == 1 {
				cmd = randomCommand(r, now)
			}
			before := snapshotBytes(t, m)
			rs := m.Apply(cmd, nil)
			where := fmt.Sprintf("seed %d step %d (%v)", seed, i, opKinds(cmd))
			checkIndex(t, m, where)
			checkFilters(t, before, cmd, rs, where)
			for _, res := range rs {
				if res.Lease != 0 {
					leases = append(leases[max(0, len(leases)-7):], res.Lease)
				}
			}
		}
	}
}

func opKinds(cmd *Command) []OpKind {
	var ks []OpKind
	for _, op := range cmd.Ops {
		ks = append(ks, op.Kind)
	}
	return ks
}

// TestIndexSaturates: a counter that saturates is never lowered, so the
// keys that share it stay in every filter after some of them are gone.
func TestIndexSaturates(t *testing.T) {
	var x bucketIndex
	h := uint64(0x1234_5678_9abc_def0)
	for range indexSat + 3 {
		x.add(h)
	}
	for range indexSat + 3 {
		x.remove(h)
	}
	if f := x.filter(1); !f.MayContain(h) {
		t.Fatal("a saturated key left the filter after as many removes as adds")
	}
	var y bucketIndex
	y.add(h)
	y.add(h)
	y.remove(h)
	if f := y.filter(1); !f.MayContain(h) {
		t.Fatal("a key added twice left the filter after one remove")
	}
	y.remove(h)
	if f := y.filter(1); f.MayContain(h) {
		t.Fatal("a key stayed in the filter after as many removes as adds")
	}
}

// TestCreditFilterFolds: a filter folded to any size contains every key
// added, and is as large as the keys need, at most the index's size.
func TestCreditFilterFolds(t *testing.T) {
	var x bucketIndex
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]uint64, 5000)
	for i := range keys {
		keys[i] = r.Uint64()
		x.add(keys[i])
	}
	for _, n := range []int{0, 1, 100, len(keys), 1 << 18, 1 << 30} {
		f := x.filter(n)
		if want := min(indexSize/64, max(1, n*filterBitsPerKey/64)); len(f.words) < want || len(f.words) > 2*want {
			t.Errorf("filter for %d keys has %d words, want about %d", n, len(f.words), want)
		}
		for _, h := range keys {
			if !f.MayContain(h) {
				t.Fatalf("filter for %d keys (%d words) leaves out an added key", n, len(f.words))
			}
		}
	}
	fp := 0
	f := x.filter(len(keys))
	for range 100_000 {
		if f.MayContain(r.Uint64()) {
			fp++
		}
	}
	if fp > 3000 { // about 1% expected
		t.Errorf("%d false positives in 100000 at %d bits a key", fp, len(f.words)*64/len(keys))
	}
}

// Union keeps every key of both filters, whatever their two sizes, and
// refuses filters it cannot combine.
func TestFilterUnion(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var xa, xb bucketIndex
	var ka, kb []uint64
	for range 3000 {
		h := r.Uint64()
		xa.add(h)
		ka = append(ka, h)
	}
	for range 200 {
		h := r.Uint64()
		xb.add(h)
		kb = append(kb, h)
	}
	a, b := xa.filter(len(ka)), xb.filter(len(kb))
	if len(a.words) == len(b.words) {
		t.Fatalf("want filters of two sizes, got %d words each", len(a.words))
	}
	for _, pair := range [][2]Filter{{a, b}, {b, a}, {Filter{}, a}} {
		u, ok := Union(pair[0], pair[1])
		if !ok {
			t.Fatal("union refused")
		}
		for _, h := range append(slices.Clone(ka), kb...) {
			if (pair[0].MayContain(h) || pair[1].MayContain(h)) && !u.MayContain(h) {
				t.Fatalf("union of %d and %d words leaves out a key one of them holds", len(pair[0].words), len(pair[1].words))
			}
		}
	}
	if _, ok := Union(a, Filter{words: make([]uint64, 3), k: filterProbes}); ok {
		t.Error("combined a filter whose length is not a power of two")
	}
	if _, ok := Union(a, Filter{words: make([]uint64, 4), k: 3}); ok {
		t.Error("combined filters of different probes")
	}
}
