package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// streamNode serves CheckStream on a real gRPC server: each request is
// answered from its own goroutine after a random pause (so answers come
// out of order), with the item's limit and cost echoed in the result. An
// item keyed "bad" gets INVALID_ARGUMENT; "hold" waits for release;
// "die" ends the stream with UNAVAILABLE.
type streamNode struct {
	quoratev1.UnimplementedRateLimiterServer
	release  chan struct{}
	read     atomic.Int64 // requests read, over all streams
	held     atomic.Int64 // requests waiting for release now
	timeouts chan time.Duration
}

func newStreamNode() *streamNode {
	return &streamNode{release: make(chan struct{}), timeouts: make(chan time.Duration, 100)}
}

func (f *streamNode) CheckStream(st quoratev1.RateLimiter_CheckStreamServer) error {
	var sendMu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel() // before wg.Wait: held checks give up when the handler ends
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			wg.Wait() // answer what is in flight, then end with OK
			return nil
		}
		if err != nil {
			return err
		}
		f.read.Add(1)
		if t := req.GetTimeout(); t != nil {
			select {
			case f.timeouts <- t.AsDuration():
			default:
			}
		}
		it := req.GetCheck().GetItems()[0]
		if it.GetKey() == "die" {
			return status.Error(codes.Unavailable, "node going away")
		}
		wg.Go(func() {
			a := &quoratev1.CheckStreamResponse{Id: req.GetId()}
			switch it.GetKey() {
			case "bad":
				a.Result = &quoratev1.CheckStreamResponse_Error{Error: status.New(codes.InvalidArgument, "items[0].key: bad").Proto()}
			case "hold":
				f.held.Add(1)
				select {
				case <-f.release:
				case <-ctx.Done():
				}
				f.held.Add(-1)
				if ctx.Err() != nil {
					return // the stream is ending: no answer
				}
				fallthrough
			default:
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond) // interleavings, under test
				a.Result = &quoratev1.CheckStreamResponse_Response{Response: &quoratev1.CheckResponse{
					Decision: quoratev1.Decision_DECISION_ALLOW,
					Results:  []*quoratev1.ItemResult{{Limit: it.GetLimit(), Remaining: it.GetCost()}},
				}}
			}
			sendMu.Lock()
			defer sendMu.Unlock()
			_ = st.Send(a)
		})
	}
}

// startStreamNode serves f on 127.0.0.1:0 and returns a client of it and a
// function that stops the server (also called when the test ends).
func startStreamNode(t *testing.T, f *streamNode) (*Client, func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quoratev1.RegisterRateLimiterServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	c, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			srv.Stop()
			<-done
		})
	}
	t.Cleanup(func() {
		c.Close()
		stop()
	})
	return c, stop
}

func streamReq(key string, limit, cost int64) *quoratev1.CheckRequest {
	return &quoratev1.CheckRequest{Items: []*quoratev1.Item{{
		Name: "api", Key: key, Algorithm: quoratev1.Algorithm_ALGORITHM_TOKEN_BUCKET,
		Limit: limit, Period: durationpb.New(time.Second), Cost: cost,
	}}}
}

func openStream(t *testing.T, c *Client, opts ...StreamOption) *Stream {
	t.Helper()
	s, err := c.CheckStream(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Many goroutines share one stream; each gets the answer to its own check,
// and one bad request fails alone.
func TestStreamConcurrentChecks(t *testing.T) {
	c, _ := startStreamNode(t, newStreamNode())
	s := openStream(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := range 50 {
				limit, cost := int64(g*1000+i), int64(1+(g+i)%9)
				resp, err := s.Check(ctx, streamReq(fmt.Sprintf("g%d:%d", g, i), limit, cost))
				if err != nil {
					t.Errorf("client %d check %d: %v", g, i, err)
					return
				}
				if r := resp.GetResults()[0]; r.GetLimit() != limit || r.GetRemaining() != cost {
					t.Errorf("client %d check %d: got limit %d cost %d; want %d, %d (another caller's answer)", g, i, r.GetLimit(), r.GetRemaining(), limit, cost)
				}
			}
		})
	}
	wg.Go(func() {
		_, err := s.Check(ctx, streamReq("bad", 1, 1))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("bad request: %v; want INVALID_ARGUMENT", err)
		}
	})
	wg.Wait()
	if _, err := s.Check(ctx, streamReq("after", 7, 1)); err != nil {
		t.Errorf("a check after the bad one: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := s.Check(ctx, streamReq("closed", 1, 1)); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("check after Close: %v; want ErrStreamClosed", err)
	}
}

// A caller whose context ends gets ctx.Err() at once; its late answer is
// dropped and its slot comes back when that answer arrives.
func TestStreamCallerGivesUp(t *testing.T) {
	f := newStreamNode()
	c, _ := startStreamNode(t, f)
	s := openStream(t, c, WithMaxInFlight(1))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.Check(ctx, streamReq("hold", 1, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held check: %v; want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("gave up after %v", d)
	}
	if got := <-f.timeouts; got <= 0 || got > 50*time.Millisecond {
		t.Errorf("the node was told a timeout of %v; want the caller's 50ms at most", got)
	}
	// The one slot is still taken by the abandoned check: a new one waits.
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if _, err := s.Check(short, streamReq("next", 1, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with the slot taken: %v; want DeadlineExceeded", err)
	}
	close(f.release) // the late answer comes, and is dropped
	resp, err := s.Check(context.Background(), streamReq("next", 3, 2))
	if err != nil || resp.GetResults()[0].GetLimit() != 3 {
		t.Fatalf("after the late answer: %v, %v; want the answer to this check", resp, err)
	}
}

// The stream breaking fails every waiter with ErrStreamBroken and the
// node's status; later checks fail at once; a new stream works.
func TestStreamBreaks(t *testing.T) {
	f := newStreamNode()
	c, stop := startStreamNode(t, f)
	s := openStream(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 10)
	for range 10 {
		go func() {
			_, err := s.Check(ctx, streamReq("hold", 1, 1))
			errs <- err
		}()
	}
	await.True(t, 10*time.Second, "10 checks held by the node", func() bool { return f.held.Load() >= 10 })
	if _, err := s.Check(ctx, streamReq("die", 1, 1)); !errors.Is(err, ErrStreamBroken) || status.Code(err) != codes.Unavailable {
		t.Errorf("the check that broke it: %v", err)
	}
	for range 10 {
		if err := <-errs; !errors.Is(err, ErrStreamBroken) || status.Code(err) != codes.Unavailable {
			t.Errorf("waiter: %v; want ErrStreamBroken with UNAVAILABLE", err)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed")
	}
	if _, err := s.Check(ctx, streamReq("x", 1, 1)); !errors.Is(err, ErrStreamBroken) {
		t.Errorf("check on the broken stream: %v", err)
	}
	if err := s.Close(); !errors.Is(err, ErrStreamBroken) {
		t.Errorf("Close of a broken stream: %v; want why it broke", err)
	}

	s2 := openStream(t, c)
	if resp, err := s2.Check(ctx, streamReq("again", 5, 1)); err != nil || resp.GetResults()[0].GetLimit() != 5 {
		t.Fatalf("new stream: %v, %v", resp, err)
	}
	// The server going away breaks it too.
	held := make(chan error, 1)
	go func() {
		_, err := s2.Check(ctx, streamReq("hold", 1, 1))
		held <- err
	}()
	await.True(t, 10*time.Second, "1 checks held by the node", func() bool { return f.held.Load() >= 1 })
	stop()
	if err := <-held; !errors.Is(err, ErrStreamBroken) || status.Code(err) != codes.Unavailable {
		t.Errorf("after the server stopped: %v; want ErrStreamBroken with UNAVAILABLE", err)
	}
}

// No more than WithMaxInFlight checks are on the wire at once.
func TestStreamMaxInFlight(t *testing.T) {
	f := newStreamNode()
	c, _ := startStreamNode(t, f)
	s := openStream(t, c, WithMaxInFlight(4))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			if _, err := s.Check(ctx, streamReq("hold", 1, 1)); err != nil {
				t.Error(err)
			}
		})
	}
	await.True(t, 10*time.Second, "4 checks held by the node", func() bool { return f.held.Load() >= 4 })
	// Time for a fifth check to reach the node if the bound let it: the
	// absence of an event can only be watched for a while.
	time.Sleep(100 * time.Millisecond)
	if r := f.read.Load(); r != 4 {
		t.Errorf("the node read %d checks; bound 4", r)
	}
	close(f.release)
	wg.Wait()
	if r := f.read.Load(); r != 12 {
		t.Errorf("the node read %d checks; want 12", r)
	}
}

// Close waits for the checks in flight to be answered.
func TestStreamCloseWaitsForAnswers(t *testing.T) {
	f := newStreamNode()
	c, _ := startStreamNode(t, f)
	s := openStream(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := s.Check(ctx, streamReq("hold", 1, 1))
			errs <- err
		}()
	}
	await.True(t, 10*time.Second, "3 checks held by the node", func() bool { return f.held.Load() >= 3 })
	time.AfterFunc(50*time.Millisecond, func() { close(f.release) })
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("check in flight at Close: %v", err)
		}
	}
}
