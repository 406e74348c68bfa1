package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// admin is quorate.v1.Admin on the public port. Writes are validated here
// first (so a bad document is refused with its positions before anything
// is proposed), then the node has the meta group apply them, whose state
// machine validates again against the set it holds at that point in the
// log. Every change is written to the audit log with its caller.
type admin struct {
	pb.UnimplementedAdminServer
	f *Frontend
}

// maxBlockDescriptors bounds an emergency block's scope.
const maxBlockDescriptors = 16

func (a *admin) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return a.f.node.Status(), nil
}

func (a *admin) ApplyPolicies(ctx context.Context, req *pb.ApplyPoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	name := req.GetSourceName()
	if name == "" {
		name = "document"
	}
	doc, err := policy.ParseDocument(name, []byte(req.GetDocument()))
	if err != nil {
		return nil, badRequest("document", "%v", err)
	}
	if len(doc.Policies) == 0 && doc.Extraction == nil && !req.GetPrune() {
		return nil, badRequest("document", "no policies and no extraction in %s", name)
	}
	// Reviewed here, where the write enters, and not by the meta group's
	// state machine: a set stored before a rule must still replay.
	snap, _ := a.f.node.Policies()
	warnings, err := snap.Review(doc.Policies, req.GetPrune())
	if err != nil {
		return nil, badRequest("document", "%v", err)
	}
	resp, err := a.changePolicies(ctx, &meta.Command{Op: meta.OpApply, Policies: doc.Policies, Extraction: doc.Extraction, Prune: req.GetPrune(),
		Source: req.GetSourceName()}, req.GetDryRun())
	if resp != nil {
		resp.Warnings = warnings
	}
	return resp, err
}

func (a *admin) DeletePolicies(ctx context.Context, req *pb.DeletePoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	if len(req.GetPolicyIds()) == 0 {
		return nil, badRequest("policy_ids", "name at least one policy")
	}
	return a.changePolicies(ctx, &meta.Command{Op: meta.OpDelete, IDs: req.GetPolicyIds()}, req.GetDryRun())
}

func (a *admin) changePolicies(ctx context.Context, c *meta.Command, dryRun bool) (*pb.ApplyPoliciesResponse, error) {
	c.Who = security.PrincipalName(ctx)
	res, err := a.f.node.ChangePolicies(ctx, c, dryRun)
	if err != nil {
		return nil, adminError(err)
	}
	if !dryRun {
		attrs := []any{"who", c.Who, "op", c.Op, "version", res.Version,
			"added", auditIDs(res.Changes.Added), "changed", auditIDs(res.Changes.Changed), "removed", auditIDs(res.Changes.Removed)}
		if c.Op == meta.OpRollback {
			attrs = append(attrs, "to", c.To)
		}
		a.f.cfg.Audit.Info("audit: policy change", attrs...)
	}
	return changeResponse(res, !dryRun), nil
}

// auditIDsShown is how many ids of a kind an audit line names: a bulk
// apply of 20,000 policies would otherwise log a line of 400 KB.
const auditIDsShown = 20

// auditIDs is ids, or its first auditIDsShown and how many more.
func auditIDs(ids []string) any {
	if len(ids) <= auditIDsShown {
		return ids
	}
	return fmt.Sprintf("%v and %d more", ids[:auditIDsShown], len(ids)-auditIDsShown)
}

func changeResponse(res meta.Result, applied bool) *pb.ApplyPoliciesResponse {
	return &pb.ApplyPoliciesResponse{
		Version: res.Version, Added: res.Changes.Added, Changed: res.Changes.Changed,
		Removed: res.Changes.Removed, Unchanged: res.Changes.Unchanged, Diff: res.Diff, Applied: applied,
	}
}

func (a *admin) GetPolicy(_ context.Context, req *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error) {
	st := a.f.node.PolicySet()
	i, ok := slices.BinarySearchFunc(st.Policies, req.GetPolicyId(), func(p *policy.Policy, id string) int { return cmp.Compare(p.ID, id) })
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no policy %q in version %d", req.GetPolicyId(), st.Version)
	}
	b, err := json.Marshal(st.Policies[i])
	if err != nil {
		return nil, err
	}
	return &pb.GetPolicyResponse{Json: string(b), Version: st.Version}, nil
}

func (a *admin) ListPolicies(context.Context, *pb.ListPoliciesRequest) (*pb.ListPoliciesResponse, error) {
	st := a.f.node.PolicySet()
	resp := &pb.ListPoliciesResponse{Version: st.Version}
	for _, p := range st.Policies { // sorted by id
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		resp.Policies = append(resp.Policies, string(b))
	}
	for _, bl := range st.Blocks {
		b, err := json.Marshal(bl)
		if err != nil {
			return nil, err
		}
		resp.Blocks = append(resp.Blocks, string(b))
	}
	if st.Extraction != nil {
		b, err := json.Marshal(st.Extraction)
		if err != nil {
			return nil, err
		}
		resp.Extraction = string(b)
	}
	return resp, nil
}

func (a *admin) Block(ctx context.Context, req *pb.BlockRequest) (*pb.BlockResponse, error) {
	d := req.GetDuration()
	switch {
	case len(req.GetDescriptors()) == 0:
		return nil, badRequest("descriptors", "name at least one descriptor to block (ip=203.0.113.8, tenant_id=t_1, ...)")
	case len(req.GetDescriptors()) > maxBlockDescriptors:
		return nil, badRequest("descriptors", "at most %d", maxBlockDescriptors)
	case d == nil || d.CheckValid() != nil || d.AsDuration() <= 0:
		return nil, badRequest("duration", "required: how long the block lasts (at most %s)", meta.MaxBlockFor)
	case d.AsDuration() > meta.MaxBlockFor:
		return nil, badRequest("duration", "%s is longer than the maximum of %s", d.AsDuration(), meta.MaxBlockFor)
	case len(req.GetReason()) > 1024:
		return nil, badRequest("reason", "longer than 1024 bytes")
	}
	who := security.PrincipalName(ctx)
	b := policy.Block{Scope: req.GetDescriptors(), ExpiresAt: a.f.node.Now().Add(d.AsDuration()).UTC(), Reason: req.GetReason(), CreatedBy: who}
	check := b
	check.ID = "pending" // the meta group names it
	if _, err := policy.Compile(nil, []policy.Block{check}, 0); err != nil {
		return nil, badRequest("descriptors", "%v", err)
	}
	res, err := a.f.node.ChangePolicies(ctx, &meta.Command{Op: meta.OpBlock, Block: &b, Who: who}, false)
	if err != nil {
		return nil, adminError(err)
	}
	if res.Block == nil {
		return nil, status.Error(codes.Internal, "block: the meta group returned no block")
	}
	a.f.cfg.Audit.Info("audit: emergency block", "who", who, "block", res.Block.ID, "scope", b.Scope, "until", res.Block.ExpiresAt, "reason", b.Reason, "version", res.Version)
	return &pb.BlockResponse{BlockId: res.Block.ID, ExpiresAt: timestamppb.New(res.Block.ExpiresAt), Version: res.Version}, nil
}

func (a *admin) Unblock(ctx context.Context, req *pb.UnblockRequest) (*pb.ApplyPoliciesResponse, error) {
	if req.GetBlockId() == "" {
		return nil, badRequest("block_id", "required")
	}
	who := security.PrincipalName(ctx)
	res, err := a.f.node.ChangePolicies(ctx, &meta.Command{Op: meta.OpUnblock, IDs: []string{req.GetBlockId()}, Who: who}, false)
	if err != nil {
		return nil, adminError(err)
	}
	a.f.cfg.Audit.Info("audit: emergency block lifted", "who", who, "block", req.GetBlockId(), "version", res.Version)
	return changeResponse(res, true), nil
}

func (a *admin) Explain(ctx context.Context, req *pb.ExplainRequest) (*pb.ExplainResponse, error) {
	if req.GetDescriptors() == nil {
		return nil, badRequest("descriptors", "required: the request to explain")
	}
	ex, err := a.f.node.Engine().Explain(ctx, descriptors(req.GetDescriptors()))
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &pb.ExplainResponse{Version: ex.Version, BlockId: ex.BlockID, Decision: checkResponse(ex.Answer), Tier: ex.Tier}
	for _, m := range ex.Matches {
		resp.Matches = append(resp.Matches, &pb.PolicyMatch{PolicyId: m.PolicyID, Selected: m.Selected, Why: m.Why,
			Layer: m.Layer.String(), LayerFrom: m.LayerFrom, Kind: m.Kind.String(), KindFrom: m.KindFrom})
	}
	return resp, nil
}

// TopKeys: the most denied or hottest keys per policy, merged across the
// nodes that answer.
func (a *admin) TopKeys(ctx context.Context, req *pb.TopKeysRequest) (*pb.TopKeysResponse, error) {
	return topKeys(ctx, a.f.node, req)
}

// Leave: the answering node leaves the cluster, once its replicas have
// moved to the others.
func (a *admin) Leave(ctx context.Context, _ *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	a.f.cfg.Audit.Info("audit: leave", "who", security.PrincipalName(ctx), "node", a.f.node.NodeID())
	epoch, err := a.f.node.Leave(ctx)
	if err != nil {
		return nil, adminError(err)
	}
	return &pb.LeaveResponse{Epoch: epoch}, nil
}

// RemoveNode replaces a node that is down for good.
func (a *admin) RemoveNode(ctx context.Context, req *pb.RemoveNodeRequest) (*pb.RemoveNodeResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, badRequest("node_id", "required")
	}
	who := security.PrincipalName(ctx)
	a.f.cfg.Audit.Info("audit: remove node", "who", who, "node", id)
	epoch, err := a.f.node.RemoveNode(ctx, who, id)
	if err != nil {
		return nil, adminError(err)
	}
	return &pb.RemoveNodeResponse{Epoch: epoch}, nil
}

// SplitShards splits shards (or every shard) online; the meta leader's
// mover runs the splits.
func (a *admin) SplitShards(ctx context.Context, req *pb.SplitShardsRequest) (*pb.SplitShardsResponse, error) {
	who := security.PrincipalName(ctx)
	a.f.cfg.Audit.Info("audit: split shards", "who", who, "shards", req.GetShards(), "all", req.GetAll(), "at", req.GetAt())
	sps, epoch, err := a.f.node.SplitShards(ctx, who, req.GetShards(), req.GetAll(), req.GetAt())
	if err != nil {
		return nil, adminError(err)
	}
	resp := &pb.SplitShardsResponse{Epoch: epoch}
	for _, sp := range sps {
		resp.Splits = append(resp.Splits, &pb.SplitShardsResponse_Split{Parent: uint32(sp.Parent), Child: uint32(sp.Child), At: sp.At})
	}
	return resp, nil
}

// adminError is a node's error as the caller's status.
func adminError(err error) error {
	var me *meta.Error
	if errors.As(err, &me) {
		return status.Error(me.Kind.Code(), me.Msg)
	}
	return rpcError(err)
}
