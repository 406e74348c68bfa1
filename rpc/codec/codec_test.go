package codec

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// limitServer counts the checks and forwards that reach it, and holds each
// Check until release is closed (when it is not nil).
type limitServer struct {
	pb.UnimplementedRateLimiterServer
	pb.UnimplementedInternalServer
	checks, inFlight, peak atomic.Int64
	release                chan struct{}
}

func (s *limitServer) Check(ctx context.Context, req *pb.CheckRequest) (*pb.CheckResponse, error) {
	s.checks.Add(1)
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	if s.release != nil {
		<-s.release
	}
	return &pb.CheckResponse{Decision: pb.Decision_DECISION_ALLOW}, nil
}

func (s *limitServer) CheckStream(stream pb.RateLimiter_CheckStreamServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		s.checks.Add(1)
		if err := stream.Send(&pb.CheckStreamResponse{Id: req.GetId()}); err != nil {
			return err
		}
	}
}

func (s *limitServer) Forward(_ context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	return &pb.ForwardResponse{Replies: make([]*pb.ShardReply, len(req.GetBatches()))}, nil
}

// serveLimits serves srv with a public port's options for b (the client
// bound is the transport's; zero values take a node's defaults) on
// loopback and returns a connection to it.
func serveLimits(t *testing.T, b Bounds, srv *limitServer) *grpc.ClientConn {
	t.Helper()
	if b.Client == 0 {
		b.Client = 4 << 20
	}
	b.Transport = b.Client
	return serveWith(t, b, srv)
}

func serveWith(t *testing.T, b Bounds, srv *limitServer) *grpc.ClientConn {
	t.Helper()
	if b.Items == 0 {
		b.Items = 1000
	}
	if b.Streams == 0 {
		b.Streams = 1024
	}
	s := grpc.NewServer(ServerOptions(b)...)
	pb.RegisterRateLimiterServer(s, srv)
	pb.RegisterInternalServer(s, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(256<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// rawCodec sends []byte as they are, so a test can send what a Go proto
// client would refuse to marshal (invalid UTF-8, broken wire format).
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.([]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return encoding.GetCodecV2("proto").Unmarshal(data, v)
}

// wire helpers: a CheckRequest in wire form, field by field.
func bytesField(b []byte, num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func wireItem(name, key string) []byte {
	it := bytesField(nil, 1, []byte(name))
	it = bytesField(it, 2, []byte(key))
	it = protowire.AppendVarint(protowire.AppendTag(it, 4, protowire.VarintType), 10) // limit
	return it
}

func wireCheck(items ...[]byte) []byte {
	var b []byte
	for _, it := range items {
		b = bytesField(b, 3, it)
	}
	return b
}

func rawCheck(conn *grpc.ClientConn, req []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return conn.Invoke(ctx, "/quorate.v1.RateLimiter/Check", req, &pb.CheckResponse{}, grpc.ForceCodecV2(rawCodec{}))
}

// TestServerCodecRefusesBadInput: what a client sends that the node must
// not decode, or cannot, is answered INVALID_ARGUMENT (or
// RESOURCE_EXHAUSTED for size) and never reaches the handler.
func TestServerCodecRefusesBadInput(t *testing.T) {
	srv := &limitServer{}
	conn := serveLimits(t, Bounds{Client: 64 << 10, Items: 10}, srv)
	eleven := make([][]byte, 11)
	for i := range eleven {
		eleven[i] = wireItem("api", "k")
	}
	cases := []struct {
		name string
		req  []byte
		code codes.Code
		msg  string
	}{
		{"invalid UTF-8 in a key", wireCheck(wireItem("api", "k\xff\xfe")), codes.InvalidArgument, "UTF-8"},
		{"invalid UTF-8 in a name", wireCheck(wireItem("a\xc3", "k")), codes.InvalidArgument, "UTF-8"},
		{"invalid UTF-8 in request_id", bytesField(wireCheck(wireItem("api", "k")), 1, []byte{0xff}), codes.InvalidArgument, "UTF-8"},
		{"truncated wire format", wireCheck(wireItem("api", "k"))[:5], codes.InvalidArgument, "malformed"},
		{"too many items, counted undecoded", wireCheck(eleven...), codes.InvalidArgument, "11 items exceed the maximum of 10"},
		{"larger than the message bound", bytesField(wireCheck(wireItem("api", "k")), 1, []byte(strings.Repeat("x", 70<<10))), codes.ResourceExhausted, "larger than max"},
	}
	for _, c := range cases {
		err := rawCheck(conn, c.req)
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.msg) {
			t.Errorf("%s: got %v, want %s mentioning %q", c.name, err, c.code, c.msg)
		}
	}
	if n := srv.checks.Load(); n != 0 {
		t.Errorf("%d bad requests reached the handler", n)
	}
	if err := rawCheck(conn, wireCheck(wireItem("api", "ключ"))); err != nil {
		t.Fatalf("a valid request (UTF-8 key): %v", err)
	}
	if n := srv.checks.Load(); n != 1 {
		t.Errorf("the valid request reached the handler %d times, want 1", n)
	}
}

// TestServerCodecStream: a bad message on a CheckStream ends the stream
// with INVALID_ARGUMENT, after the good ones before it were answered.
func TestServerCodecStream(t *testing.T) {
	srv := &limitServer{}
	conn := serveLimits(t, Bounds{}, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "CheckStream", ServerStreams: true, ClientStreams: true}
	st, err := conn.NewStream(ctx, desc, "/quorate.v1.RateLimiter/CheckStream", grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	streamed := func(id uint64, check []byte) []byte {
		b := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), id)
		return bytesField(b, 2, check)
	}
	if err := st.SendMsg(streamed(1, wireCheck(wireItem("api", "k")))); err != nil {
		t.Fatal(err)
	}
	if err := st.RecvMsg(&pb.CheckStreamResponse{}); err != nil {
		t.Fatalf("good message: %v", err)
	}
	if err := st.SendMsg(streamed(2, wireCheck(wireItem("api", "\xff")))); err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(&pb.CheckStreamResponse{})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("bad message: %v, want InvalidArgument about UTF-8", err)
	}
	if n := srv.checks.Load(); n != 1 {
		t.Errorf("%d messages reached the handler, want 1", n)
	}
}

// TestServerCodecPeerMessages: on the peer port the internal services'
// messages are bounded by PeerMaxMsgSize, not the client bound: a forward
// far larger than a client may send goes through, and a client's check of
// that size is still refused undecoded.
func TestServerCodecPeerMessages(t *testing.T) {
	srv := &limitServer{}
	conn := serveWith(t, Bounds{Transport: PeerMaxMsgSize, Client: 64 << 10}, srv)
	req := &pb.ForwardRequest{Batches: []*pb.ShardBatch{{Command: make([]byte, 1<<20)}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pb.NewInternalClient(conn).Forward(ctx, req); err != nil {
		t.Fatalf("1 MiB forward with a 64 KiB client bound: %v", err)
	}
	big := bytesField(wireCheck(wireItem("api", "k")), 1, make([]byte, 1<<20))
	if err := rawCheck(conn, big); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("1 MiB check on the peer port: %v, want ResourceExhausted", err)
	}
	if n := srv.checks.Load(); n != 0 {
		t.Fatalf("%d oversized checks reached the handler", n)
	}
}

// TestPublicTransportBound: the public port refuses a message over the
// client bound from its header, in the transport, before reading it.
func TestPublicTransportBound(t *testing.T) {
	srv := &limitServer{}
	conn := serveLimits(t, Bounds{Client: 64 << 10}, srv)
	big := bytesField(wireCheck(wireItem("api", "k")), 1, make([]byte, 1<<20))
	err := rawCheck(conn, big)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "grpc: received message larger than max") {
		t.Fatalf("1 MiB check: %v, want the transport's ResourceExhausted", err)
	}
}

// TestMaxConcurrentStreams: one connection has at most
// MaxConcurrentStreams calls in progress; the others wait for a free one.
func TestMaxConcurrentStreams(t *testing.T) {
	srv := &limitServer{release: make(chan struct{})}
	conn := serveLimits(t, Bounds{Streams: 2}, srv)
	done := make(chan error, 5)
	for range 5 {
		go func() { done <- rawCheck(conn, wireCheck(wireItem("api", "k"))) }()
	}
	// Two calls hold their slots; the peak below says no third ran beside
	// them.
	await.Until(t, 5*time.Second, func() error {
		if got := srv.inFlight.Load(); got != 2 {
			return fmt.Errorf("%d calls in progress on one connection, want 2", got)
		}
		return nil
	})
	close(srv.release)
	for range 5 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if p := srv.peak.Load(); p != 2 {
		t.Errorf("at most %d calls at once, want 2", p)
	}
}
