package topk

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecodeMerge: summaries arrive from other nodes as bytes. Decoding
// never panics and either refuses with ErrSummary or gives valid
// summaries, whose merge (and cut) is valid and bounded.
func FuzzDecodeMerge(f *testing.F) {
	sk, _ := NewSketch(3)
	for _, k := range []string{"a", "b", "a", "c", "d", "a\x1f/v1", "b"} {
		sk.Add(k, 3)
	}
	valid, _ := json.Marshal([]Summary{sk.Summary(), {Policy: "p", By: Denied, K: 2, N: 9, Min: 2, Entries: []Entry{{"x", 5, 0}, {"y", 2, 2}}}})
	for _, seed := range []string{
		string(valid),
		`[]`, `null`, `[{}]`, `[{"k":1,"n":-1}]`,
		`[{"k":1,"n":5,"entries":[{"key":"a","count":9223372036854775807}]}]`,
		`[{"k":4096,"n":9223372036854775807,"min":9223372036854775807,"entries":[{"key":"a","count":9223372036854775807,"err":9223372036854775807}]},` +
			`{"k":1,"n":9223372036854775807,"min":9223372036854775807}]`,
		`[{"k":2,"n":5,"entries":[{"key":"a","count":1},{"key":"a","count":1}]}]`,
		`[{"by":"denied","k":1,"n":1,"entries":[{"key":"\u0000","count":1}]}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ss, err := DecodeSummaries(data)
		if err != nil {
			if !errors.Is(err, ErrSummary) || ss != nil {
				t.Fatalf("error %v (not ErrSummary?) with %d summaries", err, len(ss))
			}
			return
		}
		for _, s := range ss {
			if err := s.Validate(); err != nil {
				t.Fatalf("decoded an invalid summary: %v", err)
			}
		}
		if len(ss) == 0 {
			return
		}
		// Merged with itself too: the same keys from two nodes.
		m := Merge(append(ss, ss...)...)
		if err := m.Validate(); err != nil {
			t.Fatalf("merge of valid summaries is invalid: %v\n%+v", err, m)
		}
		if len(m.Entries) > MaxK {
			t.Fatalf("%d entries", len(m.Entries))
		}
		if err := m.Top(1).Validate(); err != nil {
			t.Fatalf("cut: %v", err)
		}
		for _, c := range Combine(ss, ss) {
			if err := c.Validate(); err != nil {
				t.Fatalf("combine: %v", err)
			}
		}
	})
}
