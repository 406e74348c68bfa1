package envoyconf

import (
	"os"
	"strings"
	"testing"

	"github.com/quorate/quorate/policy"
)

func load(t *testing.T, file string) ([]policy.Policy, *Index) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Policies(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ps, NewIndex(policy.SetOf(ps))
}

func entries(kv ...string) []Entry {
	var out []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, Entry{kv[i], kv[i+1]})
	}
	return out
}

// TestMatch is the reference's walk, one row per rule it follows.
func TestMatch(t *testing.T) {
	_, x := load(t, "testdata/example.yaml")
	for _, tc := range []struct {
		name    string
		domain  string
		entries []Entry
		want    string // "rpu/unit", "unlimited", "none", "zero", "shadow 3/MINUTE"
	}{
		{"exact value", "rl", entries("category", "account"), "4/MINUTE"},
		{"value not in the config, no key-only sibling", "rl", entries("category", "other"), "none"},
		{"unknown domain", "nope", entries("category", "account"), "none"},
		{"nested exact", "rl", entries("source_cluster", "proxy", "destination_cluster", "mock"), "1/MINUTE"},
		{"intermediate node without a limit", "rl", entries("source_cluster", "proxy"), "none"},
		{"more entries than the tree is deep", "rl", entries("category", "account", "x", "y"), "none"},
		{"key-only node", "rl", entries("foo", "anything"), "2/MINUTE"},
		{"key-only then key-only", "rl", entries("foo", "a", "bar", "b"), "3/MINUTE"},
		{"exact beats key-only", "rl", entries("foo", "a", "bar", "banned"), "zero"},
		{"shadow", "rl", entries("foo", "a", "baz", "shady"), "shadow 3/MINUTE"},
		{"nested value with no node", "rl", entries("foo", "a", "baz", "calm"), "none"},
		{"unlimited", "rl", entries("foo", "a", "bay", "x"), "unlimited"},
		{"first wildcard in file order wins", "rl", entries("path", "/api/v2/users"), "50/HOUR"},
		{"middle wildcards", "rl", entries("path", "/a--b--c"), "7/SECOND"},
		{"middle wildcards need the suffix", "rl", entries("path", "/a--b--d"), "1000/DAY"},
		{"wildcard falls back to key-only", "rl", entries("path", "/web"), "1000/DAY"},
		{"leaf without a limit stops the walk", "rl", entries("remote_address", "10.0.0.1"), "none"},
		{"its key-only sibling", "rl", entries("remote_address", "10.0.0.2"), "10/WEEK"},
		{"entries are ordered", "rl", entries("destination_cluster", "mock", "source_cluster", "proxy"), "none"},
		{"second domain", "mongo_cps", entries("database", "users"), "500/SECOND"},
		{"domains do not mix", "mongo_cps", entries("category", "account"), "none"},
		{"no entries", "rl", nil, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := x.Match(tc.domain, tc.entries)
			got := "none"
			if s := m.Spec; s != nil {
				switch {
				case s.Unlimited:
					got = "unlimited"
				case s.NoLimit:
					got = "none (marker)"
				case s.RequestsPerUnit == 0:
					got = "zero"
				default:
					got = strings.TrimPrefix(strings.Repeat("shadow ", b2i(s.Shadow)), "") + itoa(s.RequestsPerUnit) + "/" + string(s.Unit)
				}
			}
			if got == "none (marker)" {
				got = "none"
			}
			if got != tc.want {
				t.Fatalf("Match(%q, %v) = %s, want %s", tc.domain, tc.entries, got, tc.want)
			}
			if m.Spec != nil && m.PolicyID != PolicyID(m.Spec.Domain, m.Spec.Path) {
				t.Fatalf("policy id %q is not the node's %q", m.PolicyID, PolicyID(m.Spec.Domain, m.Spec.Path))
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func itoa(n uint32) string {
	s := ""
	for {
		s = string(rune('0'+n%10)) + s
		n /= 10
		if n == 0 {
			return s
		}
	}
}

// TestResolveAppliesOnlyTheNode: through quorate's own resolution, a
// request carrying a node's descriptors gets exactly that node's policy,
// and none of the others of the file.
func TestResolveAppliesOnlyTheNode(t *testing.T) {
	ps, x := load(t, "testdata/example.yaml")
	snap, err := policy.Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, es := range [][]Entry{
		entries("category", "account"),
		entries("foo", "a", "bar", "b"),
		entries("foo", "a"),
		entries("path", "/api/x"),
		entries("foo", "a", "baz", "shady"),
	} {
		m := x.Match("rl", es)
		if m.Spec == nil {
			t.Fatalf("%v: no node", es)
		}
		r := &policy.Request{Custom: map[string]string{NodeDescriptor: m.PolicyID, KeyDescriptor: Key(es)}}
		res := snap.Resolve(r, timeZero)
		if len(res.Applied) != 1 || res.Applied[0].PolicyID != m.PolicyID {
			var ids []string
			for _, a := range res.Applied {
				ids = append(ids, a.PolicyID)
			}
			t.Fatalf("%v: applied %v, want only %s", es, ids, m.PolicyID)
		}
		if got := res.Applied[0].Items[0].Key; got != Key(es) {
			t.Fatalf("%v: counts by %q, want %q", es, got, Key(es))
		}
	}
}

func TestPolicies(t *testing.T) {
	ps, _ := load(t, "testdata/example.yaml")
	byID := map[string]*policy.Policy{}
	for i := range ps {
		byID[ps[i].ID] = &ps[i]
	}
	get := func(path ...Step) *policy.Policy {
		t.Helper()
		p := byID[PolicyID("rl", path)]
		if p == nil {
			t.Fatalf("no policy for %v", path)
		}
		return p
	}
	p := get(Step{Key: "category", Value: "account"})
	if p.Algorithm != "FIXED_WINDOW" || p.Config == nil || p.Config.Limit != "4/min" || p.Layer != policy.Custom || p.Mode == policy.Shadow {
		t.Fatalf("category=account: %+v", p)
	}
	if p := get(Step{Key: "foo"}, Step{Key: "bar", Value: "banned"}); p.Kind != policy.KindBlock || !p.IsEnabled() {
		t.Fatalf("a limit of 0 is an enabled BLOCK policy: %+v", p)
	}
	if p := get(Step{Key: "foo"}, Step{Key: "bay"}); p.Kind != policy.KindBlock || p.IsEnabled() {
		t.Fatalf("unlimited is a disabled marker: %+v", p)
	}
	if p := get(Step{Key: "foo"}, Step{Key: "baz", Value: "shady"}); p.Mode != policy.Shadow {
		t.Fatalf("shadow_mode: %+v", p)
	}
	if p := get(Step{Key: "remote_address", Value: "10.0.0.1"}); p.IsEnabled() {
		t.Fatalf("a leaf without rate_limit is a disabled marker: %+v", p)
	}
	if _, ok := byID[PolicyID("rl", []Step{{Key: "source_cluster", Value: "proxy"}})]; ok {
		t.Fatal("an intermediate node without a limit needs no policy")
	}
	if p := byID[PolicyID("mongo_cps", []Step{{Key: "database", Value: "default"}})]; p == nil || p.Config.Limit != "500/8760h" {
		t.Fatalf("a year is 365 days: %+v", p)
	}
	// Another algorithm on request.
	cfg, err := Parse("x.yaml", []byte("domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 5}}]"))
	if err != nil {
		t.Fatal(err)
	}
	ps2, err := Policies(cfg, Options{Algorithm: "SLIDING_WINDOW"})
	if err != nil || ps2[0].Algorithm != "SLIDING_WINDOW" {
		t.Fatalf("algorithm option: %v %+v", err, ps2)
	}
	if _, err := Policies(cfg, Options{Algorithm: "NOPE"}); err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Fatalf("an unknown algorithm: %v", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"empty domain", "domain: ''\ndescriptors: []", "empty domain"},
		{"unknown key", "domain: d\ndescriptors: [{key: k, rate_limt: {}}]", "descriptors[0].rate_limt: unknown key"},
		{"empty key", "domain: d\ndescriptors: [{value: v}]", "descriptors[0].key: a descriptor has an empty key"},
		{"duplicate", "domain: d\ndescriptors: [{key: k, value: v}, {key: k, value: v}]", "duplicate descriptor"},
		{"bad unit", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: fortnight, requests_per_unit: 1}}]", `invalid rate limit unit "fortnight"`},
		{"unlimited with unit", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, unlimited: true}}]", "should not specify a rate limit unit when unlimited"},
		{"replaces self", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, name: a, replaces: [{name: a}]}}]", "same descriptor"},
		{"replaces empty", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}}]", "empty replaces entry"},
		{"negative", "domain: d\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: -1}}]", "requests_per_unit"},
		{"quota mode", "domain: d\ndescriptors: [{key: k, quota_mode: true}]", "quota_mode: not supported"},
		{"duplicate domain", "domain: d\n---\ndomain: d\n", `duplicate domain "d"`},
		{"not a mapping", "- 1\n", "want a mapping"},
		{"control character", "domain: d\ndescriptors: [{key: \"a\\tb\"}]", "descriptors[0].key: control character"},
		{"no domain", "", "no domain"},
		{"syntax", "domain: [", "envoyconf: x.yaml:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v, want an error containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "x.yaml") {
				t.Fatalf("the error does not name the file: %v", err)
			}
		})
	}
}

func TestKeyIsUnambiguous(t *testing.T) {
	a := Key(entries("a", "b&c=d"))
	b := Key(entries("a", "b", "c", "d"))
	if a == b {
		t.Fatalf("two descriptors share key %q", a)
	}
	long := Key(entries("k", strings.Repeat("v", 300)))
	if !strings.HasPrefix(long, "sha256:") || len(long) > MaxValueLen {
		t.Fatalf("a long key: %q", long)
	}
}

// The example shipped for users imports.
func TestExampleConfig(t *testing.T) {
	ps, x := load(t, "../../examples/envoy/ratelimit-config.yaml")
	if len(ps) != 4 {
		t.Fatalf("%d policies, want 4", len(ps))
	}
	if m := x.Match("edge", entries("api_key", "k1", "path", "/search?q=1")); m.Spec == nil || !m.Spec.Shadow {
		t.Fatalf("api_key + /search: %+v", m)
	}
	if m := x.Match("edge", entries("remote_address", "127.0.0.2")); m.Spec == nil || !m.Spec.Unlimited {
		t.Fatalf("the office: %+v", m)
	}
}
