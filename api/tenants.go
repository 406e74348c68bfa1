package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy/tenants"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// The tenant assignment's Admin calls: checked here first, so a bad
// assignment is refused naming its field before anything is proposed,
// then applied by the meta group through its leader. Changes are
// audit-logged with their counts, not their tenants (an import is a few
// hundred calls of thousands).

// List bounds of ListTenants.
const (
	defaultTenantPage = 100
	maxTenantPage     = 10_000
)

func (a *admin) SetTenants(ctx context.Context, req *pb.SetTenantsRequest) (*pb.SetTenantsResponse, error) {
	as := make(tenants.List, len(req.GetAssignments()))
	for i, x := range req.GetAssignments() {
		as[i] = tenants.Assignment{TenantID: x.GetTenantId(), Plan: x.GetPlan()}
	}
	res, err := a.changeTenants(ctx, &meta.Command{Op: meta.OpTenantSet, Tenants: as})
	if err != nil {
		return nil, err
	}
	return &pb.SetTenantsResponse{Version: res.Version, Tenants: uint64(res.Tenants), Set: uint32(res.Set), Unchanged: uint32(res.Unchanged)}, nil
}

func (a *admin) DeleteTenants(ctx context.Context, req *pb.DeleteTenantsRequest) (*pb.DeleteTenantsResponse, error) {
	res, err := a.changeTenants(ctx, &meta.Command{Op: meta.OpTenantDelete, IDs: req.GetTenantIds()})
	if err != nil {
		return nil, err
	}
	if len(req.GetTenantIds()) == 1 && res.Missing == 1 {
		return nil, status.Errorf(codes.NotFound, "tenant %q has no plan assigned (assignment version %d)", req.GetTenantIds()[0], res.Version)
	}
	return &pb.DeleteTenantsResponse{Version: res.Version, Tenants: uint64(res.Tenants), Deleted: uint32(res.Deleted), Missing: uint32(res.Missing)}, nil
}

func (a *admin) changeTenants(ctx context.Context, c *meta.Command) (meta.TenantResult, error) {
	if err := meta.CheckTenantChange(c); err != nil {
		var fe *tenants.FieldError
		if errors.As(err, &fe) {
			return meta.TenantResult{}, badRequest(fe.Field, "%s", fe.Msg)
		}
		return meta.TenantResult{}, badRequest("assignments", "%v", err)
	}
	c.Who = security.PrincipalName(ctx)
	res, err := a.f.node.ChangeTenants(ctx, c)
	if err != nil {
		return res, adminError(err)
	}
	a.f.cfg.Audit.Info("audit: tenant assignment change", "who", c.Who, "op", c.Op, "tenants", len(c.Tenants)+len(c.IDs),
		"set", res.Set, "unchanged", res.Unchanged, "deleted", res.Deleted, "missing", res.Missing, "version", res.Version)
	return res, nil
}

func (a *admin) GetTenant(_ context.Context, req *pb.GetTenantRequest) (*pb.GetTenantResponse, error) {
	id := req.GetTenantId()
	if err := tenants.ValidateID(id); err != nil {
		return nil, badRequest("tenant_id", "%s", err.(*tenants.FieldError).Msg)
	}
	t := a.f.node.Tenants()
	plan, ok := t.Plan(id)
	if !ok {
		return nil, status.Errorf(codes.NotFound, "tenant %q has no plan assigned (assignment version %d)", id, t.Version())
	}
	snap, _ := a.f.node.Policies()
	return &pb.GetTenantResponse{TenantId: id, Plan: plan, Tier: snap.PlanTier(plan), Version: t.Version()}, nil
}

func (a *admin) ListTenants(_ context.Context, req *pb.ListTenantsRequest) (*pb.ListTenantsResponse, error) {
	limit := int(req.GetLimit())
	switch {
	case limit == 0:
		limit = defaultTenantPage
	case limit > maxTenantPage:
		return nil, badRequest("limit", "%d: at most %d a page (page on with after)", limit, maxTenantPage)
	}
	t := a.f.node.Tenants()
	page, more := t.Page(req.GetAfter(), limit, req.GetPlan())
	resp := &pb.ListTenantsResponse{Version: t.Version(), Tenants: uint64(t.Len()), Plans: map[string]uint64{}}
	for _, x := range page {
		resp.Assignments = append(resp.Assignments, &pb.TenantAssignment{TenantId: x.TenantID, Plan: x.Plan})
	}
	for p, n := range t.Plans() {
		resp.Plans[p] = uint64(n)
	}
	if more {
		resp.Next = page[len(page)-1].TenantID
	}
	return resp, nil
}
