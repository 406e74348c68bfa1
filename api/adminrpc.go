package api

import (
	"context"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// admin is quorate.v1.Admin on the public port: the node's own calls,
// with Explain answered here from the decision engine.
type admin struct {
	pb.AdminServer
	f *Frontend
}

func (a *admin) Explain(ctx context.Context, req *pb.ExplainRequest) (*pb.ExplainResponse, error) {
	ex, err := a.f.node.Engine().Explain(ctx, descriptors(req.GetDescriptors()))
	if err != nil {
		return nil, rpcError(err)
	}
	resp := &pb.ExplainResponse{Version: ex.Version, BlockId: ex.BlockID, Decision: checkResponse(ex.Answer)}
	for _, m := range ex.Matches {
		resp.Matches = append(resp.Matches, &pb.PolicyMatch{PolicyId: m.PolicyID, Selected: m.Selected, Why: m.Why})
	}
	return resp, nil
}
