package policy

import (
	"fmt"
	"os"
	"testing"

	"github.com/quorate/quorate/policy/tenants"
)

// BenchmarkDecideAssigned is BenchmarkResolve's Decide for requests that
// name their tenant and no tier, the tier coming from an assignment of a
// million tenants, beside the same requests carrying their tier to a set
// without assignments.
func BenchmarkDecideAssigned(b *testing.B) {
	data, err := os.ReadFile("testdata/plans.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s, err := Compile(mustParse(b, string(data)), nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	const n = 1_000_000
	as := make([]tenants.Assignment, n)
	for i := range as {
		as[i] = tenants.Assignment{TenantID: fmt.Sprintf("t_%07d", i), Plan: []string{"FREE", "plan_pro"}[i%2]}
	}
	table, _ := (*tenants.Table)(nil).Set(as)
	assigned := s.WithTenants(table, TierFromAssignment)
	for _, sendTier := range []bool{false, true} {
		name, snap := "assignments=1M", assigned
		if sendTier {
			name, snap = "assignments=0/tier-in-request", s
		}
		b.Run(name, func(b *testing.B) {
			reqs := make([]Request, 4096)
			for i := range reqs {
				id := (i * 241) % n
				reqs[i] = Request{TenantID: fmt.Sprintf("t_%07d", id), APIKeyID: "k_1", IP: "198.51.100.7", Route: "/v1/orders"}
				if sendTier {
					reqs[i].TenantTier = []string{"FREE", "PRO"}[id%2]
				}
			}
			var res Resolution
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				snap.DecideInto(&reqs[i%len(reqs)], t0, &res)
				if len(res.Applied) < 2 {
					b.Fatalf("%d applied", len(res.Applied))
				}
			}
		})
	}
}
