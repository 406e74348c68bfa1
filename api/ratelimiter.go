package api

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/quorate/quorate/telemetry"

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

// check decides a wire request with the engine and answers in wire form,
// in a span of the caller's trace when tracing is on.
func (s *rateLimiter) check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	ctx = grpcTraceContext(ctx)
	ctx, span := telemetry.StartSpan(ctx, "quorate.Check")
	defer span.End()
	dreq := domainRequest(req)
	dreq.Source = sourceOf(ctx)
	ans, err := s.node.Engine().Check(ctx, dreq)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, rpcError(err)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("quorate.request_id", dreq.ID), attribute.String("quorate.decision", ans.Decision.String()),
			attribute.String("quorate.policy", ans.AppliedPolicyID), attribute.String("quorate.source", dreq.Source))
	}
	return checkResponse(ans), nil
}
