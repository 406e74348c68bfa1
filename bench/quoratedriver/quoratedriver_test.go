package quoratedriver

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/bench"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// server answers with canned results and remembers the last request.
type server struct {
	pb.UnimplementedRateLimiterServer
	results    []*pb.ItemResult
	last       chan *pb.CheckRequest
	streams    atomic.Int64 // CheckStreams opened
	breakAfter int
}

func (s *server) Check(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	s.last <- req
	if s.results == nil {
		return nil, status.Error(codes.Unavailable, "down")
	}
	return &pb.CheckResponse{Results: s.results}, nil
}

// CheckStream answers each request as Check does; a stream ends with
// UNAVAILABLE at its breakAfter-th request, if that is set.
func (s *server) CheckStream(st pb.RateLimiter_CheckStreamServer) error {
	s.streams.Add(1)
	for n := 1; ; n++ {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if n == s.breakAfter {
			return status.Error(codes.Unavailable, "stream broken")
		}
		a := &pb.CheckStreamResponse{Id: req.GetId()}
		if resp, err := s.Check(st.Context(), req.GetCheck()); err != nil {
			a.Result = &pb.CheckStreamResponse_Error{Error: status.Convert(err).Proto()}
		} else {
			a.Result = &pb.CheckStreamResponse_Response{Response: resp}
		}
		if err := st.Send(a); err != nil {
			return err
		}
	}
}

func serve(t *testing.T, s *server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterRateLimiterServer(g, s)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return l.Addr().String()
}

func TestCheck(t *testing.T) {
	s := &server{last: make(chan *pb.CheckRequest, 10), results: []*pb.ItemResult{
		{Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT, Remaining: 7, DecidedAtUnixNano: 42},
		{Decision: pb.Decision_DECISION_DENY, Reason: pb.Reason_REASON_REFUNDED, Index: 9, DecidedAtUnixNano: 43},
	}}
	addr := serve(t, s)
	d, err := New([]string{addr}, "leased")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l := &bench.Limit{Algorithm: "sliding_window", Limit: 5, Period: time.Minute, Burst: 2}
	items := []bench.Item{{Name: "n", Key: "a", Limit: l, Cost: 3}, {Name: "n", Key: "b", Limit: l, Cost: 1}}
	out := make([]bench.Outcome, 2)
	if err := d.Check(context.Background(), items, out); err != nil {
		t.Fatal(err)
	}
	req := <-s.last
	it := req.GetItems()[0]
	if req.GetMode() != pb.Mode_MODE_LEASED || it.GetAlgorithm() != pb.Algorithm_ALGORITHM_SLIDING_WINDOW ||
		it.GetLimit() != 5 || it.GetPeriod().AsDuration() != time.Minute || it.GetBurst() != 2 || it.GetCost() != 3 ||
		it.GetFail() != pb.FailMode_FAIL_MODE_CLOSED || it.GetKey() != "a" || it.GetName() != "n" {
		t.Errorf("request %v", req)
	}
	want := []bench.Outcome{
		// Leased, not in the log: paid for by a lease.
		{Allowed: true, Reason: bench.ReasonWithinLimit, Remaining: 7, DecidedAt: 42, Prepaid: true},
		{Reason: bench.ReasonRefunded, DecidedAt: 43},
	}
	for i := range want {
		if out[i] != want[i] {
			t.Errorf("outcome %d: %+v; want %+v", i, out[i], want[i])
		}
	}
	// The server must answer one result per item.
	if err := d.Check(context.Background(), items[:1], out[:1]); status.Code(err) != codes.Internal {
		t.Errorf("2 results for 1 item: %v; want INTERNAL", err)
	}
	<-s.last
}

func TestErrorsKeepTheirCode(t *testing.T) {
	s := &server{last: make(chan *pb.CheckRequest, 10)}
	d, err := New([]string{serve(t, s)}, "strict")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	items := []bench.Item{{Name: "n", Key: "a", Cost: 1, Limit: &bench.Limit{Algorithm: "token_bucket", Limit: 1, Period: time.Second}}}
	if err := d.Check(context.Background(), items, make([]bench.Outcome, 1)); bench.ErrorCode(err) != "UNAVAILABLE" {
		t.Errorf("%v; want UNAVAILABLE", err)
	}
	items[0].Limit = &bench.Limit{Algorithm: "bogus", Limit: 1, Period: time.Second}
	if err := d.Check(context.Background(), items, make([]bench.Outcome, 1)); bench.ErrorCode(err) != "INVALID_ARGUMENT" {
		t.Errorf("%v; want INVALID_ARGUMENT", err)
	}
	if _, err := New(nil, "strict"); err == nil {
		t.Error("no addresses: no error")
	}
	if _, err := New([]string{"x:1"}, "eventual"); err == nil {
		t.Error("bad mode: no error")
	}
}

// With the stream API, checks go over a few shared streams per node, and a
// stream that breaks is replaced: only the checks on it fail.
func TestStreamAPI(t *testing.T) {
	s := &server{last: make(chan *pb.CheckRequest, 100), breakAfter: 5, results: []*pb.ItemResult{
		{Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT, Remaining: 7, DecidedAtUnixNano: 42},
	}}
	addr := serve(t, s)
	d, err := Open([]string{addr}, Options{Mode: "strict", API: APIStream, StreamsPerNode: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l := &bench.Limit{Algorithm: "token_bucket", Limit: 5, Period: time.Minute}
	items := []bench.Item{{Name: "n", Key: "a", Limit: l, Cost: 1}}
	out := make([]bench.Outcome, 1)
	var failed int
	for i := range 12 {
		err := d.Check(context.Background(), items, out)
		switch {
		case err == nil:
			if want := (bench.Outcome{Allowed: true, Reason: bench.ReasonWithinLimit, Remaining: 7, DecidedAt: 42}); out[0] != want {
				t.Errorf("check %d: %+v; want %+v", i, out[0], want)
			}
			if req := <-s.last; req.GetItems()[0].GetKey() != "a" {
				t.Errorf("request %v", req)
			}
		case bench.ErrorCode(err) == "UNAVAILABLE":
			failed++
		default:
			t.Errorf("check %d: %v", i, err)
		}
	}
	// Two streams take turns; each breaks at its 5th check, so checks 9
	// and 10 fail and 11 and 12 go on two new streams.
	if failed != 2 || s.streams.Load() != 4 {
		t.Errorf("%d checks failed, %d streams opened; want 2 and 4", failed, s.streams.Load())
	}
	if _, err := Open([]string{addr}, Options{Mode: "strict", API: "grpc-web"}); err == nil {
		t.Error("unknown API: no error")
	}
}
