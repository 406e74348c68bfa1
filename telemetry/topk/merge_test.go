package topk

import (
	"encoding/json"
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"testing"
)

// TestMergeZipf: one Zipf stream split across three sketches (round robin,
// and by the key's hash as a ring would), merged, keeps the promise with
// the summed bound, and finds what one sketch fed the whole stream finds.
func TestMergeZipf(t *testing.T) {
	const k = 256
	st := zipfStream(2, 1_000_000, 100_000, 1.1)
	whole, _ := NewSketch(k)
	for _, id := range st.ids {
		whole.Add(st.keys[id], 1)
	}
	one := whole.Summary()
	splits := map[string]func(i int, key string) int{
		"round robin": func(i int, _ string) int { return i % 3 },
		"by hash": func(_ int, key string) int {
			h := fnv.New32a()
			h.Write([]byte(key))
			return int(h.Sum32() % 3)
		},
	}
	for name, split := range splits {
		t.Run(name, func(t *testing.T) {
			parts := make([]*Sketch, 3)
			for i := range parts {
				parts[i], _ = NewSketch(k)
			}
			for i, id := range st.ids {
				parts[split(i, st.keys[id])].Add(st.keys[id], 1)
			}
			var sumN int64
			var sums []Summary
			for _, p := range parts {
				sumN += p.N()
				sums = append(sums, p.Summary())
			}
			merged := Merge(sums...)
			if merged.N != sumN || merged.K != k || len(merged.Entries) != k {
				t.Fatalf("merged n %d k %d entries %d, want %d %d %d", merged.N, merged.K, len(merged.Entries), sumN, k, k)
			}
			if err := merged.Validate(); err != nil {
				t.Fatal(err)
			}
			bound := float64(sumN) / k
			checkGuarantee(t, st, merged, bound)
			sameHeavyHitters(t, st, merged, one, bound)
			if n := checkTop(t, st, merged, bound, 10); n < 3 {
				t.Errorf("only %d well separated prefixes of the top 10", n)
			}
		})
	}
}

// sameHeavyHitters: the keys above the bound, and the ten first, are the
// same in the merged summary as in the one sketch of the whole stream.
func sameHeavyHitters(t *testing.T, st *stream, merged, one Summary, bound float64) {
	t.Helper()
	heavy := func(s Summary) []string {
		var out []string
		for _, e := range s.Entries {
			if float64(st.count(e.Key)) > bound {
				out = append(out, e.Key)
			}
		}
		slices.Sort(out)
		return out
	}
	if a, b := heavy(merged), heavy(one); len(a) == 0 || !slices.Equal(a, b) {
		t.Errorf("heavy hitters: merged %q, one sketch %q", a, b)
	}
	for i := range 10 {
		if merged.Entries[i].Key != one.Entries[i].Key {
			t.Errorf("rank %d: merged %q, one sketch %q", i+1, merged.Entries[i].Key, one.Entries[i].Key)
		}
	}
}

// TestMergeTable: the construction by hand.
func TestMergeTable(t *testing.T) {
	s1 := Summary{Policy: "p", K: 2, N: 8, Min: 3, Entries: []Entry{{"a", 5, 0}, {"b", 3, 1}}}
	s2 := Summary{Policy: "p", K: 2, N: 8, Min: 4, Entries: []Entry{{"a", 4, 0}, {"c", 4, 3}}}
	notFull := Summary{Policy: "p", K: 2, N: 2, Entries: []Entry{{"d", 2, 0}}}
	for _, c := range []struct {
		name string
		in   []Summary
		want Summary
	}{
		{"nothing", nil, Summary{}},
		{"one is itself, sorted", []Summary{{K: 2, N: 3, Entries: []Entry{{"x", 1, 0}, {"y", 2, 0}}}},
			Summary{K: 2, N: 3, Entries: []Entry{{"y", 2, 0}, {"x", 1, 0}}}},
		// a: 5+4. b: 3 + s2's min 4, err 1+4. c: 4 + s1's min 3, err 3+3.
		// b and c tie at 7: b's error is smaller. c is dropped, so Min is
		// max(3+4, 7).
		{"full", []Summary{s1, s2}, Summary{Policy: "p", K: 2, N: 16, Min: 7, Entries: []Entry{{"a", 9, 0}, {"b", 7, 5}}}},
		// A summary that never evicted missed nothing: a and b gain no
		// error from it; d gains s1's min 3. b (3) is dropped.
		{"not full", []Summary{s1, notFull},
			Summary{Policy: "p", K: 2, N: 10, Min: 3, Entries: []Entry{{"a", 5, 0}, {"d", 5, 3}}}},
		// Neither missed a key, but the merge drops b: b's count bounds
		// every key not listed now.
		{"dropped raises min", []Summary{{K: 1, N: 5, Entries: []Entry{{"a", 5, 0}}}, {K: 1, N: 3, Entries: []Entry{{"b", 3, 0}}}},
			Summary{K: 1, N: 8, Min: 3, Entries: []Entry{{"a", 5, 0}}}},
	} {
		got := Merge(c.in...)
		if !equalSummary(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
		if len(c.in) > 0 {
			if err := got.Validate(); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}
	}
}

// TestTopCut: cutting raises Min to the largest count dropped and keeps
// the summary valid.
func TestTopCut(t *testing.T) {
	s := Summary{K: 4, N: 20, Min: 2, Entries: []Entry{{"c", 3, 2}, {"a", 9, 0}, {"b", 6, 1}}}
	got := s.Top(2)
	want := Summary{K: 2, N: 20, Min: 3, Entries: []Entry{{"a", 9, 0}, {"b", 6, 1}}}
	if !equalSummary(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	if all := s.Top(10); all.K != 4 || all.Min != 2 || all.Entries[0].Key != "a" {
		t.Errorf("Top past the entries: %+v", all)
	}
	if s.Entries[0].Key != "c" {
		t.Error("Top reordered its receiver's entries")
	}
}

// TestDecodeRejects: summaries from the network that break an invariant
// are refused with an error naming the field.
func TestDecodeRejects(t *testing.T) {
	ok := `{"policy":"p","by":"denied","window_ns":60000000000,"k":2,"n":10,"min":3,"entries":[{"key":"a","count":6,"err":0},{"key":"b","count":4,"err":3}]}`
	if ss, err := DecodeSummaries([]byte("[" + ok + "]")); err != nil || len(ss) != 1 || ss[0].By != Denied {
		t.Fatalf("valid summary: %v %+v", err, ss)
	}
	long := strings.Repeat("x", MaxKeyLen+1)
	for _, c := range []struct{ name, json, field string }{
		{"not json", `[{`, "unexpected end"},
		{"bad kind", `[{"by":"allowed","k":1}]`, "by"},
		{"negative n", `[{"k":1,"n":-1}]`, "n is -1"},
		{"negative count", `[{"k":1,"n":5,"entries":[{"key":"a","count":-1}]}]`, "entries[0].count"},
		{"negative err", `[{"k":1,"n":5,"entries":[{"key":"a","count":1,"err":-1}]}]`, "entries[0].err"},
		{"err above min", `[{"k":1,"n":5,"min":1,"entries":[{"key":"a","count":3,"err":2}]}]`, "entries[0].err"},
		{"count below min", `[{"k":1,"n":5,"min":3,"entries":[{"key":"a","count":2}]}]`, "entries[0].count"},
		{"count above n", `[{"k":1,"n":5,"entries":[{"key":"a","count":6}]}]`, "entries[0].count"},
		{"min above n", `[{"k":1,"n":5,"min":6}]`, "min is 6"},
		{"more entries than k", `[{"k":1,"n":5,"entries":[{"key":"a","count":1},{"key":"b","count":1}]}]`, "entries has 2"},
		{"k too big", `[{"k":4097}]`, "k is 4097"},
		{"duplicate key", `[{"k":2,"n":5,"entries":[{"key":"a","count":1},{"key":"a","count":1}]}]`, "listed twice"},
		{"lower bounds above n", `[{"k":2,"n":5,"entries":[{"key":"a","count":3},{"key":"b","count":3}]}]`, "more than n"},
		{"key too long", `[{"k":1,"n":5,"entries":[{"key":"` + long + `","count":1}]}]`, "entries[0].key"},
		{"float count", `[{"k":1,"n":5,"entries":[{"key":"a","count":1.5}]}]`, "count"},
		{"negative window", `[{"k":1,"window_ns":-1}]`, "window_ns"},
		{"too many summaries", "[" + strings.Repeat(`{"k":1},`, MaxWireSummaries) + `{"k":1}]`, "summaries"},
	} {
		ss, err := DecodeSummaries([]byte(c.json))
		if !errors.Is(err, ErrSummary) || !strings.Contains(err.Error(), c.field) || ss != nil {
			t.Errorf("%s: %v (summaries %d), want ErrSummary naming %q", c.name, err, len(ss), c.field)
		}
	}
}

// TestSummaryJSON: a summary crosses the wire unchanged.
func TestSummaryJSON(t *testing.T) {
	sk, _ := NewSketch(3)
	for _, k := range []string{"a", "b", "a", "c", "d", "a\x1f/v1"} {
		sk.Add(k, 2)
	}
	s := sk.Summary()
	s.Policy, s.By = "p", Denied
	b, err := json.Marshal([]Summary{s})
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeSummaries(b)
	if err != nil || len(back) != 1 || !equalSummary(back[0], s) {
		t.Fatalf("%s: %v %+v", b, err, back)
	}
}

// TestCombine: nodes' answers merge per policy and kind, in order.
func TestCombine(t *testing.T) {
	a := []Summary{{Policy: "q", K: 1, N: 1, Entries: []Entry{{"x", 1, 0}}}, {Policy: "p", By: Denied, K: 1, N: 2, Entries: []Entry{{"y", 2, 0}}}}
	b := []Summary{{Policy: "p", By: Denied, K: 1, N: 3, Entries: []Entry{{"y", 3, 0}}}, {Policy: "p", K: 1, N: 1, Entries: []Entry{{"z", 1, 0}}}}
	got := Combine(a, b)
	var names []string
	for _, s := range got {
		names = append(names, s.Policy+"/"+s.By.String())
	}
	if !slices.Equal(names, []string{"p/hits", "p/denied", "q/hits"}) || got[1].N != 5 || got[1].Entries[0].Count != 5 {
		t.Errorf("got %v: %+v", names, got)
	}
}
