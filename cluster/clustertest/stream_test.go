package clustertest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// TestCheckStream: strict checks of distinct keys with distinct limits and
// costs, many at once on one stream per node, each answered with its own
// bucket's exact state (a fresh bucket's remaining is its limit less the
// cost); a malformed request gets INVALID_ARGUMENT under its own id while
// the rest are decided. The nodes read at most 8 checks per stream
// (--stream-max-inflight), below what the clients keep in flight, so the
// stream runs against the server's bound.
func TestCheckStream(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{ExtraArgs: []string{"--stream-max-inflight", "8"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	streams := make([]*client.Stream, 3)
	for i := range streams {
		s, err := c.Client(i).CheckStream(ctx, client.WithMaxInFlight(64))
		if err != nil {
			t.Fatal(err)
		}
		streams[i] = s
	}
	const clients, perClient = 48, 10
	var wg sync.WaitGroup
	for g := range clients {
		wg.Go(func() {
			s := streams[g%3]
			for j := range perClient {
				i := g*perClient + j
				limit, cost := int64(100+i), int64(1+i%5)
				it := clustertest.Item("stream", fmt.Sprintf("user:%d", i), limit, time.Minute)
				it.Cost = cost
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				resp, err := s.Check(cctx, &pb.CheckRequest{Items: []*pb.Item{it}})
				ccancel()
				if err != nil {
					t.Errorf("check %d: %v", i, err)
					return
				}
				r := resp.GetResults()[0]
				if r.GetReason() != pb.Reason_REASON_WITHIN_LIMIT || r.GetLimit() != limit || r.GetRemaining() != limit-cost {
					t.Errorf("check %d (limit %d, cost %d): %v; want its own fresh bucket: remaining %d", i, limit, cost, r, limit-cost)
				}
			}
		})
	}
	wg.Go(func() {
		bad := clustertest.Item("stream", "", 10, time.Minute) // empty key
		_, err := streams[1].Check(ctx, &pb.CheckRequest{Items: []*pb.Item{bad}})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "items[0].key") {
			t.Errorf("bad request: %v; want INVALID_ARGUMENT naming items[0].key", err)
		}
	})
	wg.Wait()
	// Leased checks on a stream too.
	for i := range 20 {
		it := clustertest.Item("stream-leased", fmt.Sprint("k", i%4), 1000, time.Minute)
		resp, err := streams[0].Check(ctx, &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: []*pb.Item{it}})
		if err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Errorf("leased check %d: %v, %v", i, resp, err)
		}
	}
	for i, s := range streams {
		if err := s.Close(); err != nil {
			t.Errorf("closing the stream to node %d: %v", i, err)
		}
	}
}
