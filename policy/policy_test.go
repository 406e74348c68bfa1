package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func mustParse(t testing.TB, doc string) []Policy {
	t.Helper()
	ps, err := Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func ids(ps []*Policy) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

const baseSet = `
- { policy_id: plan_free, scope: { tenant_tier: FREE }, key: [tenant_id], algorithm: SLIDING_WINDOW, config: { limit: 60/min } }
- { policy_id: plan_pro,  scope: { tenant_tier: PRO },  key: [tenant_id], algorithm: SLIDING_WINDOW, config: { limit: 3000/min } }
- { policy_id: old,       key: [ip], algorithm: GCRA, config: { rate: 10/s } }
`

func TestApplySet(t *testing.T) {
	t1, t2 := t0, t0.Add(time.Hour)
	cur, ch, err := ApplySet(nil, mustParse(t, baseSet), false, t1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old", "plan_free", "plan_pro"}; !reflect.DeepEqual(ch.Added, want) {
		t.Fatalf("added %v, want %v", ch.Added, want)
	}
	in := mustParse(t, `
- { policy_id: plan_free, scope: { tenant_tier: FREE }, key: [tenant_id], algorithm: SLIDING_WINDOW, config: { limit: 60/min }, enabled: true }
- { policy_id: plan_pro,  scope: { tenant_tier: PRO },  key: [tenant_id], algorithm: SLIDING_WINDOW, config: { limit: 4000/min } }
- { policy_id: plan_ent,  scope: { tenant_tier: ENT },  key: [tenant_id], algorithm: SLIDING_WINDOW, config: { limit: 9000/min } }
`)
	for _, tc := range []struct {
		prune bool
		want  Changes
	}{
		{false, Changes{Added: []string{"plan_ent"}, Changed: []string{"plan_pro"}, Unchanged: []string{"plan_free"}}},
		{true, Changes{Added: []string{"plan_ent"}, Changed: []string{"plan_pro"}, Removed: []string{"old"}, Unchanged: []string{"plan_free"}}},
	} {
		next, ch, err := ApplySet(cur, in, tc.prune, t2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(ch, tc.want) {
			t.Errorf("prune=%v: changes %+v, want %+v", tc.prune, ch, tc.want)
		}
		for _, p := range next {
			want := t2
			if p.ID == "plan_free" || p.ID == "old" {
				want = t1 // unchanged: enabled: true is what unset means
			}
			if !p.UpdatedAt.Equal(want) {
				t.Errorf("prune=%v: %s updated_at %v, want %v", tc.prune, p.ID, p.UpdatedAt, want)
			}
		}
		wantIDs := append(append([]string{}, tc.want.Added...), tc.want.Changed...)
		wantIDs = append(wantIDs, tc.want.Unchanged...)
		if !tc.prune {
			wantIDs = append(wantIDs, "old") // kept, but not the document's
		}
		if got := ids(next); len(got) != len(wantIDs) {
			t.Errorf("prune=%v: next %v, want the ids %v", tc.prune, got, wantIDs)
		}
	}
}

func TestApplySetRefusedLeavesCurrent(t *testing.T) {
	cur, _, err := ApplySet(nil, mustParse(t, baseSet), false, t0)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := json.Marshal(cur)
	for name, doc := range map[string]string{
		"overlap":       `[{ policy_id: pro2, scope: { tenant_tier: [PRO, GOLD] }, key: [tenant_id], algorithm: GCRA, config: { rate: 1/s } }]`,
		"extends":       `[{ policy_id: child, extends: gone, scope: { tenant_id: t } }]`,
		"dup":           `[{ policy_id: a, algorithm: GCRA, config: { rate: 1/s } }, { policy_id: a, algorithm: GCRA, config: { rate: 2/s } }]`,
		"pruned-parent": `[{ policy_id: x, extends: old, scope: { tenant_id: t }, algorithm: GCRA, config: { rate: 1/s } }]`,
	} {
		next, ch, err := ApplySet(cur, mustParse(t, doc), name == "pruned-parent", t0.Add(time.Minute))
		if err == nil {
			t.Errorf("%s: applied: %v %+v", name, ids(next), ch)
			continue
		}
		if next != nil || !reflect.DeepEqual(ch, Changes{}) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v but returned %v %+v", name, err, ids(next), ch)
		}
		t.Logf("%s: %v", name, err)
	}
	if after, _ := json.Marshal(cur); string(after) != string(before) {
		t.Fatalf("current changed:\n%s\n%s", before, after)
	}
}

func TestDelete(t *testing.T) {
	cur := SetOf(mustParse(t, baseSet+`
- { policy_id: t_1, extends: plan_pro, scope: { tenant_id: t_1 } }
`))
	if _, _, err := Delete(cur, []string{"nope"}); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown id: %v", err)
	}
	_, _, err := Delete(cur, []string{"plan_pro"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "plan_pro") || !strings.Contains(err.Error(), "t_1") {
		t.Errorf("deleting an extended policy: %v", err)
	}
	next, ch, err := Delete(cur, []string{"t_1", "plan_pro"})
	if err != nil {
		t.Fatal(err)
	}
	want := Changes{Removed: []string{"plan_pro", "t_1"}}
	if !reflect.DeepEqual(ch, want) || !reflect.DeepEqual(ids(next), []string{"plan_free", "old"}) {
		t.Errorf("got %v %+v, want %+v", ids(next), ch, want)
	}
	if len(cur) != 4 {
		t.Errorf("current changed: %v", ids(cur))
	}
}

func TestDiff(t *testing.T) {
	cur := SetOf(mustParse(t, baseSet))
	next := SetOf(mustParse(t, `
- { policy_id: plan_free, scope: { tenant_tier: FREE }, key: [tenant_id], algorithm: SLIDING_WINDOW, config: { limit: 60/min } }
- { policy_id: plan_pro,  scope: { tenant_tier: PRO },  key: [tenant_id], algorithm: SLIDING_WINDOW, config: { limit: 4000/min }, mode: SHADOW }
- { policy_id: new,       key: [user_id], algorithm: GCRA, config: { rate: 10/s } }
`))
	want := "+ new\n- old\n~ plan_pro: config.limit 3000/min -> 4000/min, mode (unset) -> SHADOW\n"
	if got := Diff(cur, next); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := Diff(cur, cur); got != "" {
		t.Errorf("no change: %q", got)
	}
}

// TestRoundTrip: what get and list print (JSON or YAML) parses back to the
// same policies.
func TestRoundTrip(t *testing.T) {
	data, err := os.ReadFile("testdata/plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps := mustParse(t, string(data))
	ps[0].UpdatedAt = t0
	for name, marshal := range map[string]func(any) ([]byte, error){"json": json.Marshal, "yaml": yaml.Marshal} {
		out, err := marshal(map[string][]Policy{"policies": ps})
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse("out."+name, out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if len(back) != len(ps) {
			t.Fatalf("%s: %d policies, want %d", name, len(back), len(ps))
		}
		for i := range ps {
			if !same(&ps[i], &back[i]) {
				t.Errorf("%s: %s\n%s\n%s", name, ps[i].ID, canonical(&ps[i]), canonical(&back[i]))
			}
		}
	}
}

// TestJSONUnmarshal: a store may keep the set as JSON and read it back
// with encoding/json (no positions) instead of Parse.
func TestJSONUnmarshal(t *testing.T) {
	data, err := os.ReadFile("testdata/plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps := mustParse(t, string(data))
	ps[0].UpdatedAt = t0
	out, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	var back []Policy
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	for i := range ps {
		if !same(&ps[i], &back[i]) || !back[i].UpdatedAt.Equal(ps[i].UpdatedAt) {
			t.Errorf("%s:\n%s\n%s", ps[i].ID, canonical(&ps[i]), canonical(&back[i]))
		}
	}
	if _, err := Compile(back, nil, 1); err != nil {
		t.Fatal(err)
	}
}

func TestRequestSet(t *testing.T) {
	var r Request
	for _, kv := range [][2]string{{"tenant_id", "t"}, {"custom.team", "ops"}, {"risk_score", "0.5"}, {"idempotency_key", "i"}, {"cost", "3"}, {"method", "GET"}} {
		if err := r.Set(kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	want := Request{TenantID: "t", Method: "GET", Custom: map[string]string{"team": "ops"}, RiskScore: 0.5, HasRisk: true, IdempotencyKey: "i", Cost: 3}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got %+v, want %+v", r, want)
	}
	for _, kv := range [][2]string{{"tenant", "x"}, {"risk_score", "2"}, {"risk_score", "NaN"}, {"cost", "-1"}, {"custom.BAD", "x"}, {"custom.", "x"}} {
		if err := r.Set(kv[0], kv[1]); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(kv[0], ".")) {
			t.Errorf("Set(%q, %q): %v", kv[0], kv[1], err)
		}
	}
}

func TestRequestValidate(t *testing.T) {
	many := map[string]string{}
	for i := 0; i <= MaxCustom; i++ {
		many[fmt.Sprintf("c%d", i)] = "v"
	}
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{TenantID: strings.Repeat("x", MaxValueLen+1)}, "tenant_id"},
		{Request{Route: "/a\x00b"}, "route"},
		{Request{UserID: "\xff"}, "user_id"},
		{Request{Custom: many}, "custom descriptors"},
		{Request{Custom: map[string]string{"Team": "x"}}, "Team"},
		{Request{Custom: map[string]string{"team": "a\nb"}}, "custom.team"},
		{Request{RiskScore: 1.5, HasRisk: true}, "risk_score"},
		{Request{Cost: -1}, "cost"},
		{Request{IdempotencyKey: strings.Repeat("k", 300)}, "idempotency_key"},
	} {
		err := tc.r.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", tc.r, err, tc.want)
		}
	}
	ok := Request{TenantID: strings.Repeat("x", MaxValueLen), Route: "/ünïcode", Custom: map[string]string{"team": "ops"}, RiskScore: 1, HasRisk: true}
	if err := ok.Validate(); err != nil {
		t.Error(err)
	}
}

func TestPatternOverlap(t *testing.T) {
	for _, tc := range []struct {
		d    desc
		a, b string
		want bool
	}{
		{dRoute, "x", "x", true},
		{dRoute, "x", "y", false},
		{dRoute, "/v1/a", "/v1/*", true},
		{dRoute, "/v2/a", "/v1/*", false},
		{dRoute, "/v1/*", "/v1/a/*", true},
		{dRoute, "/v1/*", "/v2/*", false},
		{dRoute, "*", "x", true},
		{dRoute, "", "", true},
		{dRoute, "", "*", false},
		{dRoute, "", "x", false},
		{dRoute, "", "/v1/*", false},
		{dIP, "10.0.0.0/8", "10.2.0.0/16", true},
		{dIP, "10.0.0.0/8", "11.0.0.0/8", false},
		{dIP, "10.0.0.1", "10.0.0.0/24", true},
		{dIP, "2001:db8::/32", "2001:db8:1::/48", true},
		{dIP, "2001:db8::/32", "10.0.0.0/8", false},
	} {
		pa, err1 := compilePattern(descRef{d: tc.d}, tc.a)
		pb, err2 := compilePattern(descRef{d: tc.d}, tc.b)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if got, back := pa.overlaps(&pb), pb.overlaps(&pa); got != tc.want || back != tc.want {
			t.Errorf("%q vs %q: %v/%v, want %v", tc.a, tc.b, got, back, tc.want)
		}
	}
}

// overrides builds n tenant overrides of the TENANT layer.
func overrides(n int) []Policy {
	ps := make([]Policy, n)
	for i := range ps {
		ps[i] = Policy{ID: fmt.Sprintf("ovr_%d", i), Scope: Scope{"tenant_id": {fmt.Sprintf("tn_%d", i)}}, Key: []string{"tenant_id"},
			Algorithm: "SLIDING_WINDOW", Config: &Config{Limit: "5000/min"}}
	}
	return ps
}

// TestConflictCheckIndexed: the conflict check compares a tenant override
// only with the policies that share its tenant, not with every other one.
func TestConflictCheckIndexed(t *testing.T) {
	const n = 5000
	entries, _, err := build(SetOf(overrides(n)))
	if err != nil {
		t.Fatal(err)
	}
	errs, compared := conflicts(entries)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if compared > n {
		t.Fatalf("%d comparisons for %d disjoint overrides", compared, n)
	}
	// Two for one tenant are still found.
	ps := append(overrides(n), overrides(1)[0])
	ps[n].ID = "again"
	if err := Validate(ps); err == nil || !strings.Contains(err.Error(), "policy again: conflicts with policy ovr_0") {
		t.Fatalf("duplicate override: %v", err)
	}
}

// TestResolveIndexed: policies with an exact matcher are looked up, not
// scanned.
func TestResolveIndexed(t *testing.T) {
	data, _ := os.ReadFile("testdata/plans.yaml")
	ps := append(mustParse(t, string(data)), overrides(1000)...)
	s, err := Compile(ps, []Block{{ID: "b", Scope: map[string]string{"ip": "203.0.113.8"}, ExpiresAt: t0}}, 7)
	if err != nil {
		t.Fatal(err)
	}
	// Only ip_safety (no scope) and anonymous (api_key_id absent) are scanned.
	var scanned []string
	for _, i := range s.residual {
		scanned = append(scanned, s.entries[i].id)
	}
	if !reflect.DeepEqual(scanned, []string{"anonymous", "ip_safety"}) {
		t.Fatalf("scanned: %v", scanned)
	}
	if s.Version() != 7 || s.Len() != len(ps) {
		t.Errorf("version %d len %d", s.Version(), s.Len())
	}
	if p, ok := s.Policy("t_44_override"); !ok || p.Extends != "plan_pro" {
		t.Errorf("Policy: %v %v", p, ok)
	}
	res := s.Resolve(&Request{TenantID: "tn_999", TenantTier: "PRO"}, t0)
	if len(res.Applied) != 1 || res.Applied[0].PolicyID != "ovr_999" {
		t.Errorf("tn_999: %+v", res.Applied)
	}
}
