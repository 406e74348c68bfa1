package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The wire forms of a check (quorate.v1) to the decision engine's domain
// types and back. Conversion validates nothing: every wire value has a
// domain value (an unknown enum passes through as its number, or as
// unspecified), so that the engine validates in one place.

// algorithms maps the wire's algorithms to the state machine's; a value
// not in it becomes fsm.AlgorithmUnspecified, which the engine refuses.
var algorithms = map[pb.Algorithm]fsm.Algorithm{
	pb.Algorithm_ALGORITHM_TOKEN_BUCKET:          fsm.TokenBucket,
	pb.Algorithm_ALGORITHM_GCRA:                  fsm.GCRA,
	pb.Algorithm_ALGORITHM_SLIDING_WINDOW:        fsm.SlidingWindow,
	pb.Algorithm_ALGORITHM_FIXED_WINDOW:          fsm.FixedWindow,
	pb.Algorithm_ALGORITHM_SLIDING_LOG:           fsm.SlidingLog,
	pb.Algorithm_ALGORITHM_LEAKY_BUCKET_POLICING: fsm.LeakyPolicing,
	pb.Algorithm_ALGORITHM_LEAKY_BUCKET_SHAPING:  fsm.LeakyShaping,
}

// wireAlgorithms inverts algorithms, indexed by fsm.Algorithm: every answer
// names its buckets' algorithms, so no map walk per item.
var wireAlgorithms = func() []pb.Algorithm {
	out := make([]pb.Algorithm, len(algorithms)+1)
	for a, f := range algorithms {
		out[f] = a
	}
	return out
}()

func wireAlgorithm(a fsm.Algorithm) pb.Algorithm {
	if int(a) < len(wireAlgorithms) {
		return wireAlgorithms[a]
	}
	return pb.Algorithm_ALGORITHM_UNSPECIFIED
}

// domainRequest is a wire check as the engine takes it.
func domainRequest(req *pb.CheckRequest) *decide.Request {
	r := &decide.Request{ID: req.GetRequestId(), Mode: decide.Mode(req.GetMode()), DryRun: req.GetDryRun()}
	if d := req.GetDescriptors(); d != nil {
		r.Descriptors = descriptors(d)
	}
	if len(req.GetItems()) > 0 {
		r.Items = make([]decide.Item, len(req.GetItems()))
		for i, it := range req.GetItems() {
			r.Items[i] = decide.Item{
				Name: it.GetName(), Key: it.GetKey(), Algorithm: algorithms[it.GetAlgorithm()],
				Limit: it.GetLimit(), Burst: it.GetBurst(), Cost: it.GetCost(),
				Fail: decide.FailMode(it.GetFail()), IdempotencyKey: it.GetIdempotencyKey(),
			}
			if p := it.GetPeriod(); p != nil {
				r.Items[i].HasPeriod = true
				if err := p.CheckValid(); err != nil {
					r.Items[i].BadPeriod = err.Error() // the engine refuses it, naming the field
				} else {
					r.Items[i].Period = p.AsDuration()
				}
			}
		}
	}
	return r
}

func descriptors(d *pb.Descriptors) *decide.Descriptors {
	if d == nil {
		return &decide.Descriptors{}
	}
	out := &decide.Descriptors{
		TenantID: d.GetTenantId(), APIKeyID: d.GetApiKeyId(), UserID: d.GetUserId(), IP: d.GetIp(),
		Route: d.GetRoute(), Method: d.GetMethod(), Service: d.GetService(), Region: d.GetRegion(),
		TenantTier: d.GetTenantTier(), IdempotencyKey: d.GetIdempotencyKey(), Cost: d.GetCost(), Custom: d.GetCustom(),
	}
	if d.RiskScore != nil {
		rs := d.GetRiskScore()
		out.RiskScore = &rs
	}
	return out
}

var wireReasons = [...]pb.Reason{
	decide.ReasonUnspecified: pb.Reason_REASON_UNSPECIFIED,
	decide.WithinLimit:       pb.Reason_REASON_WITHIN_LIMIT,
	decide.OverLimit:         pb.Reason_REASON_OVER_LIMIT,
	decide.FailOpen:          pb.Reason_REASON_FAIL_OPEN,
	decide.Unavailable:       pb.Reason_REASON_UNAVAILABLE,
	decide.Refunded:          pb.Reason_REASON_REFUNDED,
	decide.EmergencyBlock:    pb.Reason_REASON_EMERGENCY_BLOCK,
	decide.OverLimitSoft:     pb.Reason_REASON_OVER_LIMIT_SOFT,
	decide.ShadowWouldDeny:   pb.Reason_REASON_SHADOW_WOULD_DENY,
	decide.NoPolicy:          pb.Reason_REASON_NO_POLICY,
	decide.Throttled:         pb.Reason_REASON_THROTTLED,
}

func wireReason(r decide.Reason) pb.Reason {
	if int(r) < len(wireReasons) {
		return wireReasons[r]
	}
	return pb.Reason_REASON_UNSPECIFIED
}

func wireDecision(d decide.Decision) pb.Decision {
	switch d {
	case decide.Allow:
		return pb.Decision_DECISION_ALLOW
	case decide.Deny:
		return pb.Decision_DECISION_DENY
	case decide.Throttle:
		return pb.Decision_DECISION_THROTTLE
	}
	return pb.Decision_DECISION_UNSPECIFIED
}

func wirePolicyMode(m policy.Mode) pb.PolicyMode {
	switch m {
	case policy.Soft:
		return pb.PolicyMode_POLICY_MODE_SOFT
	case policy.Shadow:
		return pb.PolicyMode_POLICY_MODE_SHADOW
	case policy.Throttle:
		return pb.PolicyMode_POLICY_MODE_THROTTLE
	}
	return pb.PolicyMode_POLICY_MODE_HARD
}

// checkResponse is an answer in its wire form.
func checkResponse(a *decide.Answer) *pb.CheckResponse {
	resp := &pb.CheckResponse{
		Decision: wireDecision(a.Decision), Reason: wireReason(a.Reason), AppliedPolicyId: a.AppliedPolicyID,
		PolicyVersion: a.PolicyVersion, DryRun: a.DryRun,
	}
	if d := a.Delay(); d > 0 {
		resp.Delay = durationpb.New(d)
	}
	if len(a.Results) > 0 {
		resp.Results = make([]*pb.ItemResult, len(a.Results))
		for i := range a.Results {
			resp.Results[i] = itemResult(&a.Results[i])
		}
	}
	if len(a.Policies) > 0 {
		resp.Policies = make([]*pb.PolicyResult, len(a.Policies))
		for i, p := range a.Policies {
			resp.Policies[i] = &pb.PolicyResult{
				PolicyId: p.PolicyID, Mode: wirePolicyMode(p.Mode), Decision: wireDecision(p.Decision), Reason: wireReason(p.Reason),
				Limit: p.Limit, Remaining: p.Remaining, ResetAfter: durationpb.New(p.ResetAfter), RetryAfter: durationpb.New(p.RetryAfter),
				Layer: p.Layer, Algorithm: wireAlgorithm(p.Algorithm),
			}
		}
	}
	return resp
}

func itemResult(r *decide.Result) *pb.ItemResult {
	return &pb.ItemResult{
		Decision: wireDecision(r.Decision), Reason: wireReason(r.Reason), Limit: r.Limit, Remaining: r.Remaining,
		ResetAfter: durationpb.New(r.ResetAfter), RetryAfter: durationpb.New(r.RetryAfter), Delay: durationpb.New(r.Delay),
		Shard: int64(r.Shard), Index: r.Index, DecidedAtUnixNano: r.DecidedAt,
		PolicyId: r.PolicyID, Level: r.Level, Algorithm: wireAlgorithm(r.Algorithm),
	}
}

// rpcError is an engine's error as a gRPC status: the one place where a
// decision's errors become codes.
func rpcError(err error) error {
	var fe *decide.FieldError
	switch {
	case errors.As(err, &fe):
		return badRequest(fe.Field, "%s", fe.Msg)
	case errors.Is(err, decide.ErrNoCluster), errors.Is(err, decide.ErrPoliciesBehind):
		return status.Error(codes.Unavailable, trimPackage(err))
	case errors.Is(err, decide.ErrNoTime):
		return status.Error(codes.DeadlineExceeded, trimPackage(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// trimPackage drops the package prefix a Go error carries ("decide: "):
// a caller reads the message, not the code's layout.
func trimPackage(err error) string {
	return strings.TrimPrefix(strings.TrimPrefix(err.Error(), "decide: "), "cluster: ")
}

// badRequest is an InvalidArgument status naming the field, with a
// google.rpc.BadRequest detail for clients that read details.
func badRequest(field, format string, args ...any) error {
	desc := fmt.Sprintf(format, args...)
	st := status.New(codes.InvalidArgument, field+": "+desc)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: desc}}}); err == nil {
		st = d
	}
	return st.Err()
}
