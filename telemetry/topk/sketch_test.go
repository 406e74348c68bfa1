package topk

import (
	"errors"
	"slices"
	"testing"
)

// TestSketchZipf: a million Zipf observations over 100k keys into 256
// counters keep the space-saving promise, and the top ten are the exact
// top ten.
func TestSketchZipf(t *testing.T) {
	const k = 256
	st := zipfStream(1, 1_000_000, 100_000, 1.1)
	sk, err := NewSketch(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range st.ids {
		sk.Add(st.keys[id], 1)
	}
	sum := sk.Summary()
	if sum.N != int64(len(st.ids)) || len(sum.Entries) != k || sum.K != k {
		t.Fatalf("n %d entries %d k %d, want %d %d %d", sum.N, len(sum.Entries), sum.K, len(st.ids), k, k)
	}
	bound := float64(sum.N) / k
	checkGuarantee(t, st, sum, bound)
	for id, tr := range st.exact {
		if float64(tr) > bound && !slices.ContainsFunc(sum.Entries, func(e Entry) bool { return e.Key == st.keys[id] }) {
			t.Errorf("%q: true %d > N/k %.1f, not reported", st.keys[id], tr, bound)
		}
	}
	// Zipf's gaps narrow down the ranking: with 1/k of a million as the
	// bound, only the first ranks are separated by more than it.
	if n := checkTop(t, st, sum, bound, 10); n < 3 {
		t.Errorf("only %d prefixes of the top 10 separated by more than N/k; the test checks too little", n)
	}
	// The entries' own errors are far below N/k for the hot keys: they
	// certify the whole top ten, which must then be the exact one.
	if e10, e11 := sum.Entries[9], sum.Entries[10]; e10.Count-e10.Err <= e11.Count {
		t.Fatalf("top ten not certified: 10th %+v, 11th %+v", e10, e11)
	}
	if n := checkTop(t, st, sum, 0, 10); n != 10 {
		t.Errorf("exact top ten has ties (%d of 10 prefixes separated)", n)
	}
}

// TestSketchEvicts: at k counters, a new key takes the smallest counter,
// inheriting its count as error; the summary is ordered.
func TestSketchEvicts(t *testing.T) {
	sk, _ := NewSketch(2)
	for _, s := range []struct {
		key string
		w   int64
	}{{"a", 5}, {"b", 3}, {"c", 1}, {"b", 0}, {"c", -4}, {"a", 1}} {
		sk.Add(s.key, s.w)
	}
	// c (1) evicted b (3): c counts 4 with error 3; weights <= 0 do nothing.
	want := Summary{K: 2, N: 10, Min: 4, Entries: []Entry{{"a", 6, 0}, {"c", 4, 3}}}
	if got := sk.Summary(); !equalSummary(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	sk.Reset()
	sk.Add("d", 2)
	if got := sk.Summary(); !equalSummary(got, Summary{K: 2, N: 2, Entries: []Entry{{"d", 2, 0}}}) {
		t.Errorf("after reset: %+v", got)
	}
}

// TestSketchHeapOrder: counts raised in any order still evict the
// smallest (the heap is kept as counters grow).
func TestSketchHeapOrder(t *testing.T) {
	sk, _ := NewSketch(4)
	for i, key := range []string{"a", "b", "c", "d"} {
		sk.Add(key, int64(10*(4-i))) // a 40, b 30, c 20, d 10
	}
	sk.Add("d", 35) // d 45: now c is the smallest
	sk.Add("e", 1)
	got := sk.Summary()
	want := []Entry{{"d", 45, 0}, {"a", 40, 0}, {"b", 30, 0}, {"e", 21, 20}}
	if !slices.Equal(got.Entries, want) || got.Min != 21 {
		t.Errorf("got %+v, want %+v min 21", got, want)
	}
}

func TestNewSketchBadK(t *testing.T) {
	for _, k := range []int{0, -1, MaxK + 1} {
		if _, err := NewSketch(k); !errors.Is(err, ErrArgument) {
			t.Errorf("k=%d: %v, want ErrArgument", k, err)
		}
	}
}

func equalSummary(a, b Summary) bool {
	return a.Policy == b.Policy && a.By == b.By && a.Window == b.Window && a.K == b.K &&
		a.N == b.N && a.Min == b.Min && slices.Equal(a.Entries, b.Entries)
}
