package topk

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// stream is a fixed Zipf stream of bucket keys and its exact counts.
type stream struct {
	keys  []string // the key of each id
	ids   []int32  // the stream, one key id per observation
	exact []int64  // true count per id
}

func zipfStream(seed uint64, n, keys int, s float64) *stream {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	z := rand.NewZipf(r, s, 1, uint64(keys-1))
	st := &stream{keys: make([]string, keys), ids: make([]int32, n), exact: make([]int64, keys)}
	for i := range st.keys {
		st.keys[i] = fmt.Sprintf("t_%d\x1f/v1/orders", i)
	}
	for i := range st.ids {
		id := int32(z.Uint64())
		st.ids[i] = id
		st.exact[id]++
	}
	return st
}

func (st *stream) count(key string) int64 {
	var id int
	if _, err := fmt.Sscanf(key, "t_%d\x1f/v1/orders", &id); err != nil {
		panic(key)
	}
	return st.exact[id]
}

// ranked is the key ids by true count, highest first (ties by id).
func (st *stream) ranked() []int {
	ids := make([]int, len(st.exact))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmpDesc(st.exact[a], st.exact[b]) })
	return ids
}

// checkGuarantee asserts the package's promise for sum against the exact
// counts, with bound the promised N/k: every listed count within
// [true, true+err], err <= Min <= bound, every key not listed at most Min,
// so every key above bound listed.
func checkGuarantee(t *testing.T, st *stream, sum Summary, bound float64) {
	t.Helper()
	if float64(sum.Min) > bound {
		t.Errorf("min %d exceeds the bound %.1f", sum.Min, bound)
	}
	listed := map[string]bool{}
	for _, e := range sum.Entries {
		listed[e.Key] = true
		tr := st.count(e.Key)
		if e.Count < tr || e.Count-e.Err > tr {
			t.Errorf("%q: count %d err %d, true %d outside [count-err, count]", e.Key, e.Count, e.Err, tr)
		}
		if e.Err > sum.Min {
			t.Errorf("%q: err %d exceeds min %d", e.Key, e.Err, sum.Min)
		}
	}
	for id, tr := range st.exact {
		if !listed[st.keys[id]] && tr > sum.Min {
			t.Errorf("%q (true %d > min %d, bound %.1f) not listed", st.keys[id], tr, sum.Min, bound)
		}
	}
}

// checkTop: wherever the exact ranking has a gap wider than bound after
// rank p, the summary's first p keys are the exact first p; returns how
// many prefixes were that well separated.
func checkTop(t *testing.T, st *stream, sum Summary, bound float64, upto int) int {
	t.Helper()
	rank := st.ranked()
	checked := 0
	for p := 1; p <= upto; p++ {
		if float64(st.exact[rank[p-1]]-st.exact[rank[p]]) <= bound {
			continue
		}
		checked++
		want := map[string]bool{}
		for _, id := range rank[:p] {
			want[st.keys[id]] = true
		}
		for _, e := range sum.Entries[:p] {
			if !want[e.Key] {
				t.Errorf("top %d: %q listed, not among the exact top %d", p, e.Key, p)
			}
		}
	}
	return checked
}
