package peer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorate/quorate/internal/await"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/telemetry"
)

// blockingInternal holds every Forward until release is closed, and
// counts the calls it received.
type blockingInternal struct {
	pb.UnimplementedInternalServer
	release  chan struct{}
	received *atomic.Int32
}

func (s blockingInternal) Forward(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	s.received.Add(1)
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return &pb.ForwardResponse{Replies: make([]*pb.ShardReply, len(req.GetBatches()))}, nil
}

// TestForwardQueueSheds: while a peer holds every forward call, the
// forwarder's calls in flight and its queue fill; a forward that then finds
// no place until its deadline is shed (nothing sent, ErrShed) and
// counted, and one that finds a place after waiting is counted as waited.
func TestForwardQueueSheds(t *testing.T) {
	srv := grpc.NewServer()
	peer := blockingInternal{release: make(chan struct{}), received: new(atomic.Int32)}
	pb.RegisterInternalServer(srv, peer)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	m := telemetry.New()
	p := NewSet(m, grpc.WithTransportCredentials(insecure.NewCredentials()))
	p.queueLen = 1
	defer p.Close()
	f, err := p.Get(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// Fill: forwardMaxInflight calls held by the peer, one held by the
	// forwarder waiting for a slot, one in the queue.
	var wg sync.WaitGroup
	long, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range forwardMaxInflight {
		wg.Go(func() { _, _ = f.Forward(long, &pb.ShardBatch{}) })
		await.True(t, 5*time.Second, fmt.Sprintf("call %d to reach the peer", i+1), func() bool { return peer.received.Load() == int32(i+1) })
	}
	wg.Go(func() { _, _ = f.Forward(long, &pb.ShardBatch{}) })
	await.True(t, 5*time.Second, "the forwarder to hold a call, waiting for a slot", func() bool { return len(f.queue) == 0 && len(f.slots) == forwardMaxInflight })
	wg.Go(func() { _, _ = f.Forward(long, &pb.ShardBatch{}) })
	await.True(t, 5*time.Second, "a call in the queue", func() bool { return len(f.queue) == 1 })
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := f.Forward(short, &pb.ShardBatch{}); !errors.Is(err, ErrShed) {
		t.Fatalf("forward into a full queue: %v, want ErrShed", err)
	}
	if got := counterValue(t, m, "forwarder", "shed"); got != 1 {
		t.Fatalf("forwarder sheds counted: %v, want 1", got)
	}
	wg.Go(func() {
		if _, err := f.Forward(long, &pb.ShardBatch{}); err != nil {
			t.Errorf("forward that waited for a place: %v", err)
		}
	})
	await.True(t, 5*time.Second, "a forward waiting for a place", func() bool { return f.waiting.Load() == 1 })
	close(peer.release)
	wg.Wait()
	if got := counterValue(t, m, "forwarder", "waited"); got != 1 {
		t.Fatalf("forwarder waits counted: %v, want 1", got)
	}
}

// counterValue reads quorate_queue_full_total{queue, outcome} from the
// node's registry.
func counterValue(t *testing.T, m *telemetry.Metrics, queue, outcome string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "quorate_queue_full_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["queue"] == queue && labels["outcome"] == outcome {
				return mt.GetCounter().GetValue()
			}
		}
	}
	return 0
}
