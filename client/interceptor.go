package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// UnaryInterceptor is the gRPC server side of Middleware: it decides each
// call before its handler, the descriptors read by the policy set's
// extraction from the call's metadata (x-tenant-id, x-api-key-id, ...),
// the route being the full method name, the method "POST" and the client
// IP the peer's. A denied call fails with RESOURCE_EXHAUSTED (UNAVAILABLE
// when its policy fails closed and its shard cannot decide) carrying a
// google.rpc.RetryInfo detail, and the handler is never called. The
// rate-limit and trace headers go out as response header metadata
// (lower-case names, as gRPC has them).
func UnaryInterceptor(d Decider, cfg MiddlewareConfig) grpc.UnaryServerInterceptor {
	cfg.setDefaults()
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := admit(ctx, d, &cfg, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
}

// StreamInterceptor decides each stream, once, when it opens, as
// UnaryInterceptor decides a call.
func StreamInterceptor(d Decider, cfg MiddlewareConfig) grpc.StreamServerInterceptor {
	cfg.setDefaults()
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		if _, err := admit(ss.Context(), d, &cfg, info.FullMethod); err != nil {
			return err
		}
		return h(srv, ss)
	}
}

// admit decides one call; the context it returns carries the request id
// in its incoming metadata.
func admit(ctx context.Context, d Decider, cfg *MiddlewareConfig, method string) (context.Context, error) {
	v := decideHTTP(ctx, d, cfg, callAsRequest(ctx, method))
	md := metadata.MD{}
	for k, vs := range v.headers {
		md[strings.ToLower(k)] = vs
	}
	_ = grpc.SetHeader(ctx, md)
	if !v.allow {
		return ctx, deniedStatus(v)
	}
	if v.delay > 0 && !cfg.wait(ctx, v.delay) {
		return ctx, status.FromContextError(ctx.Err()).Err()
	}
	in, _ := metadata.FromIncomingContext(ctx)
	in = in.Copy()
	in.Set("x-request-id", v.id)
	return metadata.NewIncomingContext(ctx, in), nil
}

// callAsRequest is a gRPC call as the HTTP request extraction reads: its
// metadata as headers, its method as the path.
func callAsRequest(ctx context.Context, method string) *http.Request {
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: method}, Header: http.Header{}}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, vs := range md {
			if !strings.HasPrefix(k, ":") {
				r.Header[http.CanonicalHeaderKey(k)] = vs
			}
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	return r.WithContext(ctx)
}

func deniedStatus(v verdict) error {
	code, msg := codes.ResourceExhausted, "rate limited"
	if v.status == http.StatusServiceUnavailable {
		code, msg = codes.Unavailable, "the rate limiter cannot decide and the policy fails closed"
	}
	st := status.New(code, msg+" ("+v.reason+"; request "+v.id+")")
	retry := time.Second
	if v.answer != nil {
		if pr, _, ok := v.answer.Deciding(); ok && pr.RetryAfter > 0 {
			retry = pr.RetryAfter
		}
	}
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)}); err == nil {
		st = d
	}
	return st.Err()
}
