package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// tailBuffer is the lines one live tail may fall behind by before it
// loses them (counted, and told to the reader).
const tailBuffer = 1024

// tailFilter checks a tail's filters; errors name the field.
func tailFilter(req *pb.TailDecisionsRequest) (decisionlog.Filter, error) {
	f := decisionlog.Filter{Policy: req.GetPolicy(), Tenant: req.GetTenantId(), Decision: strings.ToUpper(req.GetDecision())}
	if f.Decision != "" && f.Decision != "ALLOW" && f.Decision != "DENY" && f.Decision != "THROTTLE" {
		return f, badRequest("decision", "%q: want ALLOW, DENY or THROTTLE", req.GetDecision())
	}
	return f, nil
}

// tail follows the node's decision log until ctx ends, calling send for
// each line with the count lost so far.
func tail(ctx context.Context, node Node, f decisionlog.Filter, send func(line []byte, dropped uint64) error) error {
	lines, dropped, cancel, err := node.DecisionLog().Subscribe(f, tailBuffer)
	switch {
	case errors.Is(err, decisionlog.ErrTooManySubscribers):
		return status.Error(codes.ResourceExhausted, err.Error())
	case err != nil:
		return status.Error(codes.Unavailable, err.Error())
	}
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			if !ok {
				return status.Error(codes.Unavailable, "the node is stopping")
			}
			if err := send(line, dropped()); err != nil {
				return err
			}
		}
	}
}

// TailDecisions streams the node's decision log.
func (a *admin) TailDecisions(req *pb.TailDecisionsRequest, stream pb.Admin_TailDecisionsServer) error {
	f, err := tailFilter(req)
	if err != nil {
		return err
	}
	return tail(stream.Context(), a.f.node, f, func(line []byte, dropped uint64) error {
		return stream.Send(&pb.TailDecisionsResponse{Record: line, Dropped: dropped})
	})
}

// tailHTTP answers GET /v1/admin/decisions?policy=&tenant_id=&decision=:
// the node's decision log as it is written, one JSON line each
// (application/x-ndjson), until the caller hangs up.
func (b backend) tailHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	names := []string{"policy", "tenant_id", "decision"}
	for k := range q {
		if !slices.Contains(names, k) {
			writeFieldError(w, badField(k, "unknown query parameter (this route takes %s)", strings.Join(names, ", ")))
			return
		}
	}
	f, err := tailFilter(&pb.TailDecisionsRequest{Policy: q.Get("policy"), TenantId: q.Get("tenant_id"), Decision: q.Get("decision")})
	if err != nil {
		writeRPCError(w, err, func(f string) string { return f })
		return
	}
	flusher, _ := w.(http.Flusher)
	started := false
	err = tail(r.Context(), b.f.node, f, func(line []byte, _ uint64) error {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			started = true
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	})
	if err != nil && !started {
		writeRPCError(w, err, func(f string) string { return f })
	}
}
