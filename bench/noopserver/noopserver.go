// Package noopserver is quorate bench's no-op baseline: a gRPC server of
// quorate's RateLimiter API that allows every check at once, without
// looking at it. Measured with the same clients in the same run as
// quorate, it is the floor any RateLimiter server on this machine stands
// on (gRPC, protobuf, the loopback network, the tool itself), so that
// quorate/noop says what deciding costs on top of the wire.
//
// It runs as a process of its own (quorate noop-server, started and
// stopped by quorate bench with Start), as the nodes do, so that its CPU
// is metered apart from the tool's.
package noopserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/localcluster"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Server answers every check ALLOW (reason WITHIN_LIMIT), with one result
// per item carrying the item's limit, and nothing else: no validation, no
// state, no clock.
type Server struct {
	pb.UnimplementedRateLimiterServer
}

// Check allows req.
func (Server) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return allow(req), nil
}

// CheckStream allows each request as it is read and answers it at once,
// from the one goroutine that reads: the cheapest a stream can be served.
// It ends with OK when the client closes its side.
func (Server) CheckStream(stream pb.RateLimiter_CheckStreamServer) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp := &pb.CheckStreamResponse{Id: req.GetId(), Result: &pb.CheckStreamResponse_Response{Response: allow(req.GetCheck())}}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

func allow(req *pb.CheckRequest) *pb.CheckResponse {
	items := req.GetItems()
	results := make([]pb.ItemResult, len(items))
	resp := &pb.CheckResponse{Decision: pb.Decision_DECISION_ALLOW, Results: make([]*pb.ItemResult, len(items))}
	for i, it := range items {
		results[i].Decision = pb.Decision_DECISION_ALLOW
		results[i].Reason = pb.Reason_REASON_WITHIN_LIMIT
		results[i].Limit = it.GetLimit()
		resp.Results[i] = &results[i]
	}
	return resp
}

// listening is the line Serve prints once it accepts connections.
const listening = "noop-server listening on "

// Serve serves the RateLimiter API on addr (host:port; port 0 picks a
// free one) until ctx ends, after writing "noop-server listening on
// <host:port>" to out.
func Serve(ctx context.Context, addr string, out io.Writer) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("noopserver: %w", err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimiterServer(srv, Server{})
	if _, err := fmt.Fprintf(out, "%s%s\n", listening, lis.Addr()); err != nil {
		lis.Close()
		return fmt.Errorf("noopserver: %w", err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		// Streams from the tool end when it closes them; do not wait
		// for stragglers.
		t := time.AfterFunc(time.Second, srv.Stop)
		srv.GracefulStop()
		t.Stop()
	}()
	err = srv.Serve(lis)
	<-stopped
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Proc is a running noop server process.
type Proc struct {
	Addr string // gRPC address
	PID  int
	p    *localcluster.Proc
	log  *localcluster.Log
}

var listenLine = regexp.MustCompile(regexp.QuoteMeta(listening) + `(\S+)\n`)

// Start runs "bin noop-server --addr 127.0.0.1:0" and waits until it says
// where it listens (at most 10s). Stop it with Stop.
func Start(ctx context.Context, bin string) (*Proc, error) {
	log := &localcluster.Log{Max: 16 << 10}
	p, err := localcluster.StartProc(bin, []string{"noop-server", "--addr", "127.0.0.1:0"}, localcluster.ProcOptions{Stdout: log, Stderr: log, Detach: true})
	if err != nil {
		return nil, fmt.Errorf("noopserver: starting %s: %w", bin, err)
	}
	np := &Proc{PID: p.PID(), p: p, log: log}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := listenLine.FindStringSubmatch(log.String()); m != nil {
			np.Addr = m[1]
			return np, nil
		}
		select {
		case <-p.Done():
			return nil, fmt.Errorf("noopserver: exited before listening (%s): %s", p.Exit(), log.String())
		case <-ctx.Done():
			np.Stop()
			return nil, fmt.Errorf("noopserver: %w", ctx.Err())
		case <-deadline.C:
			np.Stop()
			return nil, fmt.Errorf("noopserver: not listening after 10s: %s", log.String())
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM and waits up to 5s for the process to exit, then
// kills it. It is safe to call more than once.
func (p *Proc) Stop() {
	p.p.Stop(syscall.SIGTERM, 5*time.Second)
}

// Log is what the process wrote.
func (p *Proc) Log() string { return p.log.String() }
