package api

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/quorate/quorate/telemetry"
)

// TestGRPCTraceContext: a gRPC caller's traceparent becomes the check's
// trace; without one the context is left as it is.
func TestGRPCTraceContext(t *testing.T) {
	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", "00-"+id+"-00f067aa0ba902b7-01"))
	if got := telemetry.TraceID(grpcTraceContext(ctx)); got != id {
		t.Errorf("trace id %q, want %q", got, id)
	}
	plain := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-request-id", "r1"))
	if got := grpcTraceContext(plain); got != plain {
		t.Error("a context without traceparent was replaced")
	}
}
