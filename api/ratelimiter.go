package api

import (
	"context"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// rateLimiter serves quorate.v1.RateLimiter from the node's decision
// engine.
type rateLimiter struct {
	pb.UnimplementedRateLimiterServer
	node Node
	cfg  *Config
}

func (s *rateLimiter) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	resp, err := s.check(ctx, req)
	if err == nil && req.GetMode() != pb.Mode_MODE_LEASED {
		hintLeaders(ctx, s.node, resp)
	}
	return resp, err
}

// check decides a wire request with the engine and answers in wire form.
func (s *rateLimiter) check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	ans, err := s.node.Engine().Check(ctx, domainRequest(req))
	if err != nil {
		return nil, rpcError(err)
	}
	return checkResponse(ans), nil
}
