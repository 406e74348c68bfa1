package api

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/decide"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// CheckStream decides each request of the stream as Check does, and
// answers it as soon as it is decided (see serveCheckStream).
func (s *rateLimiter) CheckStream(stream pb.RateLimiter_CheckStreamServer) error {
	return serveCheckStream(stream, s.check, streamLimits{
		maxInFlight: s.cfg.StreamMaxInFlight,
		timeout:     s.cfg.CheckTimeout,
		drain:       s.node.Stopping(),
	})
}

// decideFunc decides one check: rateLimiter.check, or a stand-in in tests.
type decideFunc func(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error)

// streamLimits bound one CheckStream.
type streamLimits struct {
	// maxInFlight is the most requests read and not yet answered: being
	// decided, or decided and waiting for the sender.
	maxInFlight int
	// timeout is each check's deadline, from when it is read (a request
	// may ask for less).
	timeout time.Duration
	// drain, once closed, ends the stream: the checks in flight are
	// answered, then the stream ends with UNAVAILABLE so the client takes
	// its next checks to another node. A node closes it when it begins to
	// stop; a gateway's stream is never idle long enough for the node's
	// graceful stop to wait it out.
	drain <-chan struct{}
}

// errDraining ends the streams of a node that is stopping.
var errDraining = status.Error(codes.Unavailable, "node is shutting down: send the remaining checks to another node")

// serveCheckStream runs one CheckStream until the client closes its side
// (then it finishes the checks in flight, sends their answers and returns
// nil: the stream ends with OK), the stream breaks, or lim.drain closes.
//
// One goroutine reads (readStream): it takes a slot before each Recv, so
// with maxInFlight requests unanswered it stops reading and HTTP/2 flow
// control holds the client back; nothing is buffered without bound. It is
// not the handler's goroutine because Recv cannot be interrupted: only the
// handler's return ends a blocked Recv, and a draining node must return.
// Each request read is decided in a goroutine of its own (at most
// maxInFlight per stream, as many as the slots): a strict check waits for a
// Raft commit, and leased ones must not queue behind it. Against deciding
// in the reading goroutine, a goroutine per check costs two allocations (90
// bytes) and no time measurable next to a check's cost on the wire
// (BenchmarkCheckStream: 10-20µs per check on loopback, either way, on a
// loaded 2-core machine). One goroutine sends, because a gRPC stream allows
// one sender at a time; it frees a request's slot once its answer is handed
// to the transport.
func serveCheckStream(stream pb.RateLimiter_CheckStreamServer, check decideFunc, lim streamLimits) error {
	ctx := stream.Context()
	slots := make(chan struct{}, max(lim.maxInFlight, 1))
	// Never full: there are never more answers than slots.
	answers := make(chan *pb.CheckStreamResponse, cap(slots))
	var sendErr error // set by the sender before it closes sent
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for a := range answers {
			if sendErr == nil {
				sendErr = stream.Send(a)
			}
			// After a failed Send the stream is gone (its context is
			// cancelled, so the checks in flight end soon): drain.
			<-slots
		}
	}()

	reqs := make(chan *pb.CheckStreamRequest)
	recvEnd := make(chan error, 1) // nil: the client closed its side
	go readStream(stream, slots, reqs, recvEnd)
	var recvErr error
	var deciding sync.WaitGroup
read:
	for {
		select {
		case req := <-reqs:
			deciding.Go(func() { answers <- decideStreamed(ctx, check, req, lim.timeout) })
		case recvErr = <-recvEnd:
			break read
		case <-lim.drain:
			recvErr = errDraining
			break read
		}
	}
	deciding.Wait()
	close(answers)
	<-sent
	switch {
	case sendErr != nil:
		return sendErr
	case recvErr != nil:
		if _, ok := status.FromError(recvErr); ok {
			return recvErr
		}
		return status.FromContextError(recvErr).Err()
	}
	return nil
}

// readStream receives requests into reqs, each holding a slot, until the
// stream ends: then it reports why on end (nil for the client's clean
// close). After the handler has returned (a drain) its Recv fails and it
// ends too; a request it holds then goes unanswered, as the stream's
// UNAVAILABLE tells the client.
func readStream(stream pb.RateLimiter_CheckStreamServer, slots chan struct{}, reqs chan<- *pb.CheckStreamRequest, end chan<- error) {
	ctx := stream.Context()
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			end <- ctx.Err()
			return
		}
		req, err := stream.Recv()
		if err != nil {
			<-slots
			if errors.Is(err, io.EOF) {
				err = nil
			}
			end <- err
			return
		}
		select {
		case reqs <- req:
		case <-ctx.Done():
			end <- ctx.Err()
			return
		}
	}
}

// decideStreamed decides one streamed request and makes its answer.
func decideStreamed(ctx context.Context, check decideFunc, req *pb.CheckStreamRequest, timeout time.Duration) *pb.CheckStreamResponse {
	resp := &pb.CheckStreamResponse{Id: req.GetId()}
	withTimeout := decide.WithCheckTimeout // the node's own timeout, no reserve taken off
	if t := req.GetTimeout(); t != nil {
		switch d := t.AsDuration(); {
		case t.CheckValid() != nil || d < 0:
			resp.Result = &pb.CheckStreamResponse_Error{Error: status.New(codes.InvalidArgument, "timeout: must be a valid, non-negative duration").Proto()}
			return resp
		case d > 0 && d < timeout:
			timeout, withTimeout = d, context.WithTimeout
		}
	}
	ctx, cancel := withTimeout(ctx, timeout)
	defer cancel()
	if req.GetCheck() == nil {
		resp.Result = &pb.CheckStreamResponse_Error{Error: status.New(codes.InvalidArgument, "check: required").Proto()}
		return resp
	}
	r, err := check(ctx, req.GetCheck())
	if err != nil {
		resp.Result = &pb.CheckStreamResponse_Error{Error: status.Convert(err).Proto()}
		return resp
	}
	resp.Result = &pb.CheckStreamResponse_Response{Response: r}
	return resp
}
