package policy

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkResolve resolves requests of rotating tenants against the plans
// example plus n tenant overrides and a few route and ip policies: the index
// keeps the cost flat from 1k to 200k policies.
func BenchmarkResolve(b *testing.B) {
	data, err := os.ReadFile("testdata/plans.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1_000, 200_000, 300_000} {
		for _, decide := range []bool{false, true} {
			name := fmt.Sprintf("policies=%dk/Resolve", n/1000)
			if decide {
				name = fmt.Sprintf("policies=%dk/Decide", n/1000)
			}
			b.Run(name, func(b *testing.B) {
				ps := append(mustParse(b, string(data)), mustParse(b, `
- { policy_id: r_orders,  scope: { route: /v1/orders },  key: [route, tenant_id], algorithm: GCRA, config: { rate: 100/s }, layer: ROUTE }
- { policy_id: r_reports, scope: { route: "/v1/reports/*" }, key: [route], algorithm: GCRA, config: { rate: 100/s }, layer: ROUTE }
- { policy_id: ip_office, scope: { ip: 192.0.2.0/24 }, key: [ip], algorithm: GCRA, config: { rate: 1000/s }, priority: 5 }
- { policy_id: ip_one,    scope: { ip: 198.51.100.9 }, key: [ip], algorithm: GCRA, config: { rate: 5/s }, priority: 9 }
`)...)
				ps = append(ps, overrides(n)...)
				s, err := Compile(ps, nil, 1)
				if err != nil {
					b.Fatal(err)
				}
				reqs := make([]Request, 1024)
				for i := range reqs {
					reqs[i] = Request{TenantID: fmt.Sprintf("tn_%d", i*(n/len(reqs))), TenantTier: "PRO", APIKeyID: "k_1",
						IP: "198.51.100.7", Route: "/v1/orders", Method: "GET"}
				}
				resolve := s.Resolve
				if decide {
					var reuse Resolution
					resolve = func(r *Request, now time.Time) Resolution {
						s.DecideInto(r, now, &reuse)
						return reuse
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; b.Loop(); i++ {
					res := resolve(&reqs[i%len(reqs)], t0)
					if len(res.Applied) != 3 {
						b.Fatalf("%d applied", len(res.Applied))
					}
				}
			})
		}
	}
}

// BenchmarkChange is what every node does per policy change: one changed
// policy applied over the set. full is Change (merge, validate and compile
// the whole set: the path before ChangeFrom); incremental is ChangeFrom
// from the set's snapshot.
func BenchmarkChange(b *testing.B) {
	for _, n := range []int{1_000, 200_000, 300_000} {
		for _, incremental := range []bool{false, true} {
			name := fmt.Sprintf("policies=%dk/full", n/1000)
			if incremental {
				name = fmt.Sprintf("policies=%dk/incremental", n/1000)
			}
			b.Run(name, func(b *testing.B) {
				cur, _, err := ApplySet(nil, overrides(n), false, t0)
				if err != nil {
					b.Fatal(err)
				}
				prev, err := CompileSet(cur, nil, 1)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; b.Loop(); i++ {
					one := overrides(1)
					one[0].Config = &Config{Limit: Amount(fmt.Sprintf("%d/min", 1000+i))}
					if incremental {
						_, _, _, err = ChangeFrom(prev, one, nil, false, t0, nil, uint64(i))
					} else {
						_, _, _, err = Change(cur, one, false, t0, nil, uint64(i))
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkGatewayDelta is what a gateway's copy costs per change of one
// policy: the node's DeltaFrom and the gateway's Patched, against a
// compile of the whole set as sent (the path before deltas; JSON not
// counted in either).
func BenchmarkGatewayDelta(b *testing.B) {
	for _, n := range []int{1_000, 300_000} {
		set, _, err := ApplySet(nil, overrides(n), false, t0)
		if err != nil {
			b.Fatal(err)
		}
		for _, delta := range []bool{false, true} {
			name := fmt.Sprintf("policies=%dk/whole", n/1000)
			if delta {
				name = fmt.Sprintf("policies=%dk/delta", n/1000)
			}
			b.Run(name, func(b *testing.B) {
				node, err := CompileSet(set, nil, 1)
				if err != nil {
					b.Fatal(err)
				}
				gw := node
				for i := 0; b.Loop(); i++ {
					b.StopTimer()
					one := overrides(1)
					one[0].Config = &Config{Limit: Amount(fmt.Sprintf("%d/min", 1000+i))}
					next, _, _, err := ChangeFrom(node, one, nil, false, t0, nil, uint64(i+2))
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					if delta {
						put, removed, ok := next.DeltaFrom(node, 100)
						if !ok {
							b.Fatal("no delta")
						}
						gw, err = gw.Patched(put, removed, nil, next.Version())
					} else {
						gw, err = CompileSet(next.Policies(), nil, next.Version())
					}
					if err != nil {
						b.Fatal(err)
					}
					node = next
				}
			})
		}
	}
}

// BenchmarkReview is what an apply adds on the node that takes it: the
// review of a document of one tenant override, of one route adjustment
// keyed by tenant (every override of the TENANT layer wins over it: a
// warning), and of the whole set again, against the plans example and n
// tenant overrides.
func BenchmarkReview(b *testing.B) {
	data, err := os.ReadFile("testdata/plans.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1_000, 200_000} {
		ps := append(mustParse(b, string(data)), overrides(n)...)
		s, err := Compile(ps, nil, 1)
		if err != nil {
			b.Fatal(err)
		}
		docs := map[string][]Policy{
			"one":   overrides(1),
			"route": mustParse(b, `- { policy_id: reports, scope: { route: /v1/reports }, key: [tenant_id], algorithm: GCRA, config: { rate: 5/s } }`),
			"all":   ps,
		}
		for _, name := range []string{"one", "route", "all"} {
			b.Run(fmt.Sprintf("policies=%dk/%s", n/1000, name), func(b *testing.B) {
				for b.Loop() {
					ws, err := s.Review(docs[name], false)
					if err != nil || name == "route" && len(ws) != 1 {
						b.Fatalf("%q, %v", ws, err)
					}
				}
			})
		}
	}
}
