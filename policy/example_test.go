package policy

import (
	"bytes"
	"os"
	"reflect"
	"testing"
)

// TestExampleIsThePlans: examples/policies.yaml, which the README shows and
// make run loads, is the worked example the tests here exercise.
func TestExampleIsThePlans(t *testing.T) {
	ex, err := os.ReadFile("../examples/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plans, err := os.ReadFile("testdata/plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ex, plans) {
		t.Fatal("examples/policies.yaml differs from policy/testdata/plans.yaml: copy one over the other")
	}
	ps, err := Parse("examples/policies.yaml", ex)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(ps, nil, 1); err != nil {
		t.Fatal(err)
	}
}

// TestDecideIntoIsResolve: the decision path's DecideInto, reusing one
// Resolution across requests, applies exactly what Resolve applies.
func TestDecideIntoIsResolve(t *testing.T) {
	ex, err := os.ReadFile("../examples/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := Parse("examples/policies.yaml", ex)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []Request{
		{TenantID: "t_44", TenantTier: "PRO", APIKeyID: "k", IP: "198.51.100.7", Route: "/v1/payments", Method: "POST"},
		{TenantID: "t_1", TenantTier: "FREE", IP: "198.51.100.7", Route: "/v1/x"},
		{TenantID: "t_2", TenantTier: "ENTERPRISE", APIKeyID: "k2", IP: "2001:db8::1", Route: "/v1/login", Method: "POST", RiskScore: 0.95, HasRisk: true},
		{IP: "203.0.113.1"},
		{},
	}
	var reuse Resolution
	for round := range 2 {
		for i := range reqs {
			want := s.Resolve(&reqs[i], t0).Applied
			s.DecideInto(&reqs[i], t0, &reuse)
			if !reflect.DeepEqual(reuse.Applied, want) && (len(want) > 0 || len(reuse.Applied) > 0) {
				t.Fatalf("round %d, request %d: DecideInto applied %+v; Resolve %+v", round, i, reuse.Applied, want)
			}
			if reuse.Matched != nil {
				t.Fatalf("DecideInto explained: %+v", reuse.Matched)
			}
		}
	}
}

// TestRepeatedPatternsApplyOnce: a scope naming one value twice (as a list,
// an address and its /32, a method in two cases) applies its policy once.
func TestRepeatedPatternsApplyOnce(t *testing.T) {
	ps, err := Parse("dup.yaml", []byte(`
- { policy_id: t, scope: { tenant_id: [t1, t1] }, key: [tenant_id], mode: SHADOW, algorithm: GCRA, config: { rate: 1/s } }
- { policy_id: i, scope: { ip: [10.0.0.1, 10.0.0.1/32] }, key: [ip], mode: SHADOW, algorithm: GCRA, config: { rate: 1/s } }
- { policy_id: m, scope: { method: [get, GET] }, key: [method], mode: SHADOW, algorithm: GCRA, config: { rate: 1/s } }
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Compile(ps, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	res := s.Resolve(&Request{TenantID: "t1", IP: "10.0.0.1", Method: "GET"}, t0)
	seen := map[string]int{}
	for _, ev := range res.Applied {
		seen[ev.PolicyID]++
	}
	for _, m := range res.Matched {
		seen["match:"+m.PolicyID]++
	}
	for _, id := range []string{"t", "i", "m"} {
		if seen[id] != 1 || seen["match:"+id] != 1 {
			t.Errorf("policy %s applied %d and matched %d times; want once each (%+v)", id, seen[id], seen["match:"+id], res.Applied)
		}
	}
}
