package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// streamTestServer serves CheckStream with serveCheckStream and a stand-in
// for rateLimiter.check.
type streamTestServer struct {
	pb.UnimplementedRateLimiterServer
	decide decideFunc
	lim    streamLimits
}

func (s *streamTestServer) CheckStream(stream pb.RateLimiter_CheckStreamServer) error {
	return serveCheckStream(stream, s.decide, s.lim)
}

// startStreamServer serves decide on a free loopback port until the test
// ends and returns a client of it.
func startStreamServer(t testing.TB, decide decideFunc, lim streamLimits) pb.RateLimiterClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimiterServer(srv, &streamTestServer{decide: decide, lim: lim})
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return pb.NewRateLimiterClient(conn)
}

// echo answers each item with what identifies it: limit, cost as
// remaining, and the key's length as shard. It validates the request as
// the engine does first.
func echo(_ context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	if err := decide.Validate(domainRequest(req), decide.Limits{}); err != nil {
		return nil, rpcError(err)
	}
	resp := &pb.CheckResponse{Decision: pb.Decision_DECISION_ALLOW}
	for _, it := range req.GetItems() {
		resp.Results = append(resp.Results, &pb.ItemResult{
			Decision: pb.Decision_DECISION_ALLOW, Reason: pb.Reason_REASON_WITHIN_LIMIT,
			Limit: it.GetLimit(), Remaining: it.GetCost(), Shard: int64(len(it.GetKey())),
		})
	}
	return resp, nil
}

func streamItem(key string, limit, cost int64) *pb.Item {
	return &pb.Item{Name: "api", Key: key, Algorithm: pb.Algorithm_ALGORITHM_TOKEN_BUCKET,
		Limit: limit, Period: durationpb.New(time.Second), Cost: cost}
}

// recvAll reads answers until the stream ends, and returns them by id
// with the stream's final error (nil for a clean end).
func recvAll(t *testing.T, st pb.RateLimiter_CheckStreamClient) (map[uint64]*pb.CheckStreamResponse, []uint64, error) {
	t.Helper()
	got := map[uint64]*pb.CheckStreamResponse{}
	var order []uint64
	for {
		a, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return got, order, nil
		}
		if err != nil {
			return got, order, err
		}
		if _, dup := got[a.GetId()]; dup {
			t.Errorf("id %d answered twice", a.GetId())
		}
		got[a.GetId()] = a
		order = append(order, a.GetId())
	}
}

// Many checks in flight on one stream, decided concurrently and answered
// out of order: each answer carries its own request's id, and its content
// is its own request's.
func TestCheckStreamAnswersMatchRequests(t *testing.T) {
	const n = 2000
	decide := func(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond) // reorder
		return echo(ctx, req)
	}
	rl := startStreamServer(t, decide, streamLimits{maxInFlight: 256, timeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := rl.CheckStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := func(i int) uint64 { return uint64(i)*7919 + 3 } // not the arrival order
	go func() {
		for i := range n {
			req := &pb.CheckStreamRequest{Id: id(i), Check: &pb.CheckRequest{Items: []*pb.Item{
				streamItem(strings.Repeat("k", 1+i%50), int64(1000+i), int64(1+i%7)),
			}}}
			if err := st.Send(req); err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
		}
		_ = st.CloseSend()
	}()
	got, order, err := recvAll(t, st)
	if err != nil {
		t.Fatalf("stream ended with %v after %d answers", err, len(got))
	}
	if len(got) != n {
		t.Fatalf("%d answers to %d requests", len(got), n)
	}
	for i := range n {
		a, ok := got[id(i)]
		if !ok {
			t.Errorf("no answer to id %d", id(i))
			continue
		}
		r := a.GetResponse().GetResults()
		if len(r) != 1 || r[0].GetLimit() != int64(1000+i) || r[0].GetRemaining() != int64(1+i%7) || r[0].GetShard() != int64(1+i%50) {
			t.Errorf("id %d answered with %v; want request %d's limit %d, cost %d, key length %d", id(i), a, i, 1000+i, 1+i%7, 1+i%50)
		}
	}
	inOrder := true
	for j := 1; j < len(order); j++ {
		inOrder = inOrder && order[j] > order[j-1]
	}
	if inOrder {
		t.Error("every answer came in request order: the checks were not decided concurrently")
	}
}

// A request that fails gets its status under its own id; the others on
// the stream are decided, and the stream ends cleanly.
func TestCheckStreamErrorsPerRequest(t *testing.T) {
	rl := startStreamServer(t, echo, streamLimits{maxInFlight: 16, timeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rl.CheckStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	good := func(id uint64) *pb.CheckStreamRequest {
		return &pb.CheckStreamRequest{Id: id, Check: &pb.CheckRequest{Items: []*pb.Item{streamItem(fmt.Sprint("user:", id), 10, 1)}}}
	}
	reqs := []*pb.CheckStreamRequest{
		good(1),
		{Id: 2, Check: &pb.CheckRequest{Items: []*pb.Item{streamItem("", 10, 1)}}}, // empty key
		good(3),
		{Id: 4}, // no check at all
		{Id: 5, Check: good(5).GetCheck(), Timeout: durationpb.New(-time.Second)},
		{Id: 6, Check: &pb.CheckRequest{Items: []*pb.Item{streamItem("k", 10, -1)}}}, // negative cost
		good(7),
	}
	for _, r := range reqs {
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got, _, err := recvAll(t, st)
	if err != nil {
		t.Fatalf("the stream failed: %v", err)
	}
	wantErr := map[uint64]string{2: "items[0].key", 4: "check: required", 5: "timeout", 6: "items[0].cost"}
	for _, r := range reqs {
		a := got[r.GetId()]
		if a == nil {
			t.Errorf("id %d: no answer", r.GetId())
			continue
		}
		if want, bad := wantErr[r.GetId()]; bad {
			e := a.GetError()
			if codes.Code(e.GetCode()) != codes.InvalidArgument || !strings.Contains(e.GetMessage(), want) {
				t.Errorf("id %d: answer %v; want INVALID_ARGUMENT naming %q", r.GetId(), a, want)
			}
			continue
		}
		if a.GetResponse().GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Errorf("id %d: answer %v; want a decision", r.GetId(), a)
		}
	}
}

// At most maxInFlight requests are read and not yet answered: with that
// many undecided, the server stops reading.
func TestCheckStreamBackpressure(t *testing.T) {
	const bound, n = 8, 100
	release := make(chan struct{})
	var started, running, peak atomic.Int64
	decide := func(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
		started.Add(1)
		r := running.Add(1)
		for p := peak.Load(); r > p && !peak.CompareAndSwap(p, r); p = peak.Load() {
		}
		defer running.Add(-1)
		<-release
		return echo(ctx, req)
	}
	rl := startStreamServer(t, decide, streamLimits{maxInFlight: bound, timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := rl.CheckStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// n small requests fit in HTTP/2's flow-control window: every Send
	// returns at once, and only the server's bound holds them back.
	for i := range n {
		if err := st.Send(&pb.CheckStreamRequest{Id: uint64(i), Check: &pb.CheckRequest{Items: []*pb.Item{streamItem("k", 10, 1)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the bound's requests to be read", func() bool { return started.Load() >= bound })
	// Not a wait for a state: an interval in which a server that read past
	// its bound would be seen doing so.
	time.Sleep(200 * time.Millisecond)
	if s := started.Load(); s != bound {
		t.Fatalf("%d requests read with the bound at %d", s, bound)
	}
	close(release)
	got, _, err := recvAll(t, st)
	if err != nil || len(got) != n {
		t.Fatalf("%d answers of %d, stream end %v", len(got), n, err)
	}
	if p := peak.Load(); p > bound {
		t.Errorf("%d checks decided at once; bound %d", p, bound)
	}
}

// When the client closes its side, the checks in flight are finished and
// answered before the stream ends with OK.
func TestCheckStreamCloseSendFinishesInFlight(t *testing.T) {
	release := make(chan struct{})
	decide := func(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
		<-release
		return echo(ctx, req)
	}
	rl := startStreamServer(t, decide, streamLimits{maxInFlight: 64, timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := rl.CheckStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := st.Send(&pb.CheckStreamRequest{Id: uint64(i), Check: &pb.CheckRequest{Items: []*pb.Item{streamItem("k", 10, 1)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(100*time.Millisecond, func() { close(release) })
	got, _, err := recvAll(t, st)
	if err != nil || len(got) != 5 {
		t.Fatalf("%d answers of 5, stream end %v", len(got), err)
	}
}

// Each check's deadline is the node's check timeout, or the request's own
// when that is shorter.
func TestCheckStreamDeadline(t *testing.T) {
	// The answer's remaining is the check's time left, in milliseconds.
	decide := func(ctx context.Context, _ *pb.CheckRequest) (*pb.CheckResponse, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			return nil, status.Error(codes.Internal, "no deadline")
		}
		return &pb.CheckResponse{Results: []*pb.ItemResult{{Remaining: time.Until(dl).Milliseconds()}}}, nil
	}
	rl := startStreamServer(t, decide, streamLimits{maxInFlight: 4, timeout: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rl.CheckStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	check := &pb.CheckRequest{Items: []*pb.Item{streamItem("k", 10, 1)}}
	for _, r := range []*pb.CheckStreamRequest{
		{Id: 1, Check: check},
		{Id: 2, Check: check, Timeout: durationpb.New(50 * time.Millisecond)},
		{Id: 3, Check: check, Timeout: durationpb.New(time.Minute)},
	} {
		if err := st.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	_ = st.CloseSend()
	got, _, err := recvAll(t, st)
	if err != nil {
		t.Fatal(err)
	}
	left := func(id uint64) int64 { return got[id].GetResponse().GetResults()[0].GetRemaining() }
	if l := left(1); l < 1000 || l > 2000 {
		t.Errorf("no timeout asked: %dms left; want the node's 2s", l)
	}
	if l := left(2); l > 50 {
		t.Errorf("50ms asked: %dms left", l)
	}
	if l := left(3); l < 1000 || l > 2000 {
		t.Errorf("1m asked: %dms left; want at most the node's 2s", l)
	}
}

// BenchmarkCheckStream is the cost of one check through a stream on
// loopback when deciding costs nothing: the wire, the dispatch and the
// sender. Compare with BenchmarkCheckUnary for the same through Check.
func BenchmarkCheckStream(b *testing.B) {
	rl := startStreamServer(b, echo, streamLimits{maxInFlight: 1024, timeout: time.Second})
	st, err := rl.CheckStream(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	req := &pb.CheckStreamRequest{Check: &pb.CheckRequest{Items: []*pb.Item{streamItem("user:42", 100, 1)}}}
	window := make(chan struct{}, 512) // requests in flight
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range b.N {
			if _, err := st.Recv(); err != nil {
				b.Error(err)
				return
			}
			<-window
		}
	}()
	b.ResetTimer()
	for i := range b.N {
		window <- struct{}{}
		req.Id = uint64(i)
		if err := st.Send(req); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.StopTimer()
	_ = st.CloseSend()
}

type unaryEcho struct {
	pb.UnimplementedRateLimiterServer
}

func (unaryEcho) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	return echo(ctx, req)
}

// BenchmarkCheckUnary is BenchmarkCheckStream's work through unary Check
// calls, 512 in flight.
func BenchmarkCheckUnary(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimiterServer(srv, unaryEcho{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rl := pb.NewRateLimiterClient(conn)
	req := &pb.CheckRequest{Items: []*pb.Item{streamItem("user:42", 100, 1)}}
	var wg sync.WaitGroup
	var next atomic.Int64
	b.ResetTimer()
	for range 512 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := rl.Check(context.Background(), req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A node that begins to stop ends its streams even while their clients
// keep them open: the check in flight is answered, then the stream ends
// with UNAVAILABLE, and the server's graceful stop is not held up.
func TestCheckStreamEndsOnDrain(t *testing.T) {
	release, reading := make(chan struct{}), make(chan struct{})
	decide := func(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
		close(reading)
		<-release
		return echo(ctx, req)
	}
	drain := make(chan struct{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimiterServer(srv, &streamTestServer{decide: decide, lim: streamLimits{maxInFlight: 8, timeout: 5 * time.Second, drain: drain}})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := pb.NewRateLimiterClient(conn).CheckStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.CheckStreamRequest{Id: 7, Check: &pb.CheckRequest{Items: []*pb.Item{streamItem("k", 10, 3)}}}); err != nil {
		t.Fatal(err)
	}
	<-reading // the server read it and is deciding it
	close(drain)
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	close(release)
	type end struct {
		got map[uint64]*pb.CheckStreamResponse
		err error
	}
	ended := make(chan end, 1)
	go func() {
		got, _, err := recvAll(t, st)
		ended <- end{got, err}
	}()
	var got map[uint64]*pb.CheckStreamResponse
	select {
	case e := <-ended:
		got, err = e.got, e.err
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end within 5s of the drain")
	}
	if status.Code(err) != codes.Unavailable {
		t.Errorf("stream ended with %v, want UNAVAILABLE", err)
	}
	if a := got[7]; a == nil || a.GetResponse().GetResults()[0].GetRemaining() != 3 {
		t.Errorf("the check in flight was not answered before the end: %v", got)
	}
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("graceful stop still waiting for the stream 5s after the drain")
	}
}
