package api

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc/metadata"

	"github.com/quorate/quorate/internal/httpheaders"
	"github.com/quorate/quorate/telemetry"
)

// requestID is a decision request's id: the body's if it gave one, else
// the X-Request-Id header's when it can be trusted into logs, else a new
// one.
func requestID(body string, r *http.Request) string {
	if body != "" {
		return body
	}
	return httpheaders.RequestIDOf(r)
}

// setTraceHeaders sets the answer's trace headers: the id, the decision
// and the deciding policy, and r's subject headers passed through.
func setTraceHeaders(out http.Header, r *http.Request, id, decision, policyID string) {
	httpheaders.SetTrace(out, id, r.Header.Get(httpheaders.TenantID), r.Header.Get(httpheaders.APIKeyID))
	out.Set(httpheaders.RateLimitDecision, decision)
	if policyID != "" {
		out.Set(httpheaders.PolicyID, policyID)
	}
}

// source names the front end a check came through, for its decision log
// record; a check without one came through gRPC.
type sourceKey struct{}

func withSource(ctx context.Context, src string) context.Context {
	return context.WithValue(ctx, sourceKey{}, src)
}

func sourceOf(ctx context.Context) string {
	if s, ok := ctx.Value(sourceKey{}).(string); ok {
		return s
	}
	return "grpc"
}

// httpTraceContext is r's context with the caller's trace context (W3C
// traceparent) and the front end's name.
func httpTraceContext(r *http.Request, src string) context.Context {
	ctx := r.Context()
	if r.Header.Get("traceparent") != "" {
		ctx = telemetry.Propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	return withSource(ctx, src)
}

// grpcTraceContext is ctx with the trace context a gRPC caller sent in
// its metadata, if any. It looks for traceparent alone first: copying the
// whole metadata (FromIncomingContext) would cost every check an
// allocation.
func grpcTraceContext(ctx context.Context) context.Context {
	if len(metadata.ValueFromIncomingContext(ctx, "traceparent")) == 0 {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return telemetry.Propagator.Extract(ctx, metadataCarrier(md))
}

// metadataCarrier reads gRPC metadata as a propagation carrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c metadataCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
