package cluster

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// blockingInternal holds every Forward until release is closed.
type blockingInternal struct {
	pb.UnimplementedInternalServer
	release chan struct{}
}

func (s blockingInternal) Forward(ctx context.Context, req *pb.ForwardRequest) (*pb.ForwardResponse, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	return &pb.ForwardResponse{Replies: make([]*pb.ShardReply, len(req.GetBatches()))}, nil
}

// TestForwardQueueSheds: while a peer holds every forward call, the
// forwarder's calls in flight and its queue fill; a forward that then finds
// no place until its deadline is shed (nothing sent, errForwardShed) and
// counted, and one that finds a place after waiting is counted as waited.
func TestForwardQueueSheds(t *testing.T) {
	srv := grpc.NewServer()
	peer := blockingInternal{release: make(chan struct{})}
	pb.RegisterInternalServer(srv, peer)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	m := newMetrics()
	p := newPeers(m, grpcLocalDialer(nil), grpc.WithTransportCredentials(insecure.NewCredentials()))
	p.queueLen = 1
	defer p.close()
	f, err := p.get(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// Fill: forwardMaxInflight calls held by the peer, one held by the
	// forwarder waiting for a slot, one in the queue.
	var wg sync.WaitGroup
	long, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range forwardMaxInflight + 2 {
		wg.Go(func() { _, _ = f.forward(long, &pb.ShardBatch{}) })
		time.Sleep(20 * time.Millisecond)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := f.forward(short, &pb.ShardBatch{}); !errors.Is(err, errForwardShed) {
		t.Fatalf("forward into a full queue: %v, want errForwardShed", err)
	}
	if got := counterValue(m.queueFull.WithLabelValues("forwarder", "shed")); got != 1 {
		t.Fatalf("forwarder sheds counted: %v, want 1", got)
	}
	wg.Go(func() {
		if _, err := f.forward(long, &pb.ShardBatch{}); err != nil {
			t.Errorf("forward that waited for a place: %v", err)
		}
	})
	time.Sleep(50 * time.Millisecond)
	close(peer.release)
	wg.Wait()
	if got := counterValue(m.queueFull.WithLabelValues("forwarder", "waited")); got != 1 {
		t.Fatalf("forwarder waits counted: %v, want 1", got)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var d dto.Metric
	_ = c.Write(&d)
	return d.GetCounter().GetValue()
}
