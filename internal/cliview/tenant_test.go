package cliview

import (
	"strings"
	"testing"
	"time"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func TestTenantViews(t *testing.T) {
	var b strings.Builder
	list := &pb.ListTenantsResponse{Version: 7, Tenants: 3, Plans: map[string]uint64{"PRO": 2, "FREE": 1}, Next: "t_2",
		Assignments: []*pb.TenantAssignment{{TenantId: "t_1", Plan: "PRO"}, {TenantId: "t_2", Plan: "plan_enterprise"}}}
	if err := Tenants(&b, list); err != nil {
		t.Fatal(err)
	}
	want := "TENANT  PLAN\nt_1     PRO\nt_2     plan_enterprise\n2 of 3 tenants, assignment version 7; plans: FREE 1, PRO 2\nmore: --after t_2\n"
	if b.String() != want {
		t.Errorf("list:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	Tenant(&b, &pb.GetTenantResponse{TenantId: "t_1", Plan: "PRO", Tier: "PRO", Version: 7})
	Explain(&b, &pb.ExplainResponse{Version: 3, Tier: "tenant_tier PRO from the tenant assignment"})
	ImportDone(&b, Import{File: "f.csv", Sent: 1000, Chunks: 1, Set: 990, Unchanged: 10, Version: 8, Tenants: 1000, Took: 2 * time.Second})
	want = "t_1: plan PRO, assignment version 7\npolicy version 3\ntenant_tier PRO from the tenant assignment\nno policy matches\n" +
		"imported 1000 assignments from f.csv in 1 chunks: 990 set, 10 unchanged; assignment version 8, 1000 tenants; took 2s, 500/s\n"
	if b.String() != want {
		t.Errorf("views:\n%s\nwant\n%s", b.String(), want)
	}
}
