package envoyconf

import (
	"os"
	"testing"
	"time"

	"github.com/quorate/quorate/policy"
)

var timeZero = time.Unix(0, 0)

// FuzzParse: any bytes parse or fail cleanly; what parses converts to a
// valid policy set (or a clear error), and every node the index rebuilds
// from the policies matches its own path.
func FuzzParse(f *testing.F) {
	ex, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ex)
	f.Add([]byte("domain: d\ndescriptors: [{key: k, value: 'a*', rate_limit: {unit: second, requests_per_unit: 3}}]"))
	f.Add([]byte("domain: d\ndescriptors: [{key: k, descriptors: [{key: j}]}]\n---\ndomain: e\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("f.yaml", data)
		if err != nil {
			return
		}
		ps, err := Policies(cfg, Options{})
		if err != nil {
			return
		}
		x := NewIndex(policy.SetOf(ps))
		for i := range ps {
			s, ok := SpecOf(&ps[i])
			if !ok {
				t.Fatalf("policy %s carries no spec", ps[i].ID)
			}
			var es []Entry
			wild := false
			for _, st := range s.Path {
				es = append(es, Entry{st.Key, st.Value})
				wild = wild || st.Value == "" || containsStar(st.Value)
			}
			if wild {
				continue // a wildcard sibling earlier in the file may match it first
			}
			if m := x.Match(s.Domain, es); m.Spec == nil || m.PolicyID != ps[i].ID {
				t.Fatalf("%s: its own path %v matched %q", ps[i].ID, es, m.PolicyID)
			}
		}
	})
}

func containsStar(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '*' {
			return true
		}
	}
	return false
}
