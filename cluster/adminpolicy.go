package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// The Admin service's policy calls. Writes are validated here first (so a
// bad document is refused with its positions before anything is proposed),
// then proposed to the meta group, whose state machine validates again
// against the set it holds at that point in the log.

// maxBlockDescriptors bounds an emergency block's scope.
const maxBlockDescriptors = 16

func (s adminServer) ApplyPolicies(ctx context.Context, req *pb.ApplyPoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	name := req.GetSourceName()
	if name == "" {
		name = "document"
	}
	incoming, err := policy.Parse(name, []byte(req.GetDocument()))
	if err != nil {
		return nil, badRequest("document", "%v", err)
	}
	if len(incoming) == 0 && !req.GetPrune() {
		return nil, badRequest("document", "no policies in %s", name)
	}
	c := &meta.Command{Op: meta.OpApply, Policies: incoming, Prune: req.GetPrune()}
	return s.n.changePolicies(ctx, c, req.GetDryRun())
}

func (s adminServer) DeletePolicies(ctx context.Context, req *pb.DeletePoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	if len(req.GetPolicyIds()) == 0 {
		return nil, badRequest("policy_ids", "name at least one policy")
	}
	return s.n.changePolicies(ctx, &meta.Command{Op: meta.OpDelete, IDs: req.GetPolicyIds()}, req.GetDryRun())
}

// changePolicies has the meta group apply a change, or, for a dry run,
// computes it against this node's copy of the set. A write is validated by
// the meta leader against the set in the log, not against this node's
// copy, which may be a change behind. The answer comes once this node
// decides with the change too, so what a caller reads back from the node it
// wrote to includes its write.
func (n *Node) changePolicies(ctx context.Context, c *meta.Command, dryRun bool) (*pb.ApplyPoliciesResponse, error) {
	if dryRun {
		cur := n.metaFSM.Policies()
		now := n.clock()
		next, ch, _, code, err := meta.NextPolicies(cur.Policies, meta.LiveBlocks(cur.Blocks, now), c, now)
		if err != nil {
			return nil, metaError(meta.Result{Err: err.Error(), Code: code})
		}
		return changeResponse(meta.Result{Version: cur.Version, Changes: ch, Diff: policy.Diff(cur.Policies, next)}, false), nil
	}
	c.Who = security.PrincipalName(ctx)
	res, err := n.proposeMeta(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := metaError(res); err != nil {
		return nil, err
	}
	n.sec.audit.Info("audit: policy change", "who", c.Who, "op", c.Op, "version", res.Version,
		"added", res.Changes.Added, "changed", res.Changes.Changed, "removed", res.Changes.Removed)
	n.awaitPolicyVersion(ctx, res.Version)
	return changeResponse(res, true), nil
}

// awaitPolicyVersion waits, within ctx and at most a second, until this
// node's meta replica has applied version v. Followers apply a change a
// round trip after the leader (the barrier behind each change sees to it).
func (n *Node) awaitPolicyVersion(ctx context.Context, v uint64) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n.metaFSM.WaitVersion(ctx, v)
}

func changeResponse(res meta.Result, applied bool) *pb.ApplyPoliciesResponse {
	return &pb.ApplyPoliciesResponse{
		Version: res.Version, Added: res.Changes.Added, Changed: res.Changes.Changed,
		Removed: res.Changes.Removed, Unchanged: res.Changes.Unchanged, Diff: res.Diff, Applied: applied,
	}
}

func (s adminServer) GetPolicy(_ context.Context, req *pb.GetPolicyRequest) (*pb.GetPolicyResponse, error) {
	st := s.n.metaFSM.Policies()
	i := slices.IndexFunc(st.Policies, func(p policy.Policy) bool { return p.ID == req.GetPolicyId() })
	if i < 0 {
		return nil, status.Errorf(codes.NotFound, "no policy %q in version %d", req.GetPolicyId(), st.Version)
	}
	b, err := json.Marshal(st.Policies[i])
	if err != nil {
		return nil, err
	}
	return &pb.GetPolicyResponse{Json: string(b), Version: st.Version}, nil
}

func (s adminServer) ListPolicies(context.Context, *pb.ListPoliciesRequest) (*pb.ListPoliciesResponse, error) {
	st := s.n.metaFSM.Policies()
	resp := &pb.ListPoliciesResponse{Version: st.Version}
	ps := slices.Clone(st.Policies)
	slices.SortFunc(ps, func(a, b policy.Policy) int { return cmp.Compare(a.ID, b.ID) })
	for _, p := range ps {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		resp.Policies = append(resp.Policies, string(b))
	}
	for _, bl := range meta.LiveBlocks(st.Blocks, s.n.clock()) {
		b, err := json.Marshal(bl)
		if err != nil {
			return nil, err
		}
		resp.Blocks = append(resp.Blocks, string(b))
	}
	return resp, nil
}

func (s adminServer) Block(ctx context.Context, req *pb.BlockRequest) (*pb.BlockResponse, error) {
	n := s.n
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
	b := policy.Block{Scope: req.GetDescriptors(), ExpiresAt: n.clock().Add(d.AsDuration()).UTC(), Reason: req.GetReason(), CreatedBy: security.PrincipalName(ctx)}
	check := b
	check.ID = "pending" // the meta group names it
	if _, err := policy.Compile(nil, []policy.Block{check}, 0); err != nil {
		return nil, badRequest("descriptors", "%v", err)
	}
	res, err := n.proposeMeta(ctx, &meta.Command{Op: meta.OpBlock, Block: &b, Who: b.CreatedBy})
	if err != nil {
		return nil, err
	}
	if err := metaError(res); err != nil {
		return nil, err
	}
	if res.Block == nil {
		return nil, status.Error(codes.Internal, "block: the meta group returned no block")
	}
	n.sec.audit.Info("audit: emergency block", "who", b.CreatedBy, "block", res.Block.ID, "scope", b.Scope, "until", res.Block.ExpiresAt, "reason", b.Reason, "version", res.Version)
	n.awaitPolicyVersion(ctx, res.Version)
	return &pb.BlockResponse{BlockId: res.Block.ID, ExpiresAt: timestamppb.New(res.Block.ExpiresAt), Version: res.Version}, nil
}

func (s adminServer) Unblock(ctx context.Context, req *pb.UnblockRequest) (*pb.ApplyPoliciesResponse, error) {
	if req.GetBlockId() == "" {
		return nil, badRequest("block_id", "required")
	}
	who := security.PrincipalName(ctx)
	res, err := s.n.proposeMeta(ctx, &meta.Command{Op: meta.OpUnblock, IDs: []string{req.GetBlockId()}, Who: who})
	if err != nil {
		return nil, err
	}
	if err := metaError(res); err != nil {
		return nil, err
	}
	s.n.sec.audit.Info("audit: emergency block lifted", "who", who, "block", req.GetBlockId(), "version", res.Version)
	s.n.awaitPolicyVersion(ctx, res.Version)
	return changeResponse(res, true), nil
}
