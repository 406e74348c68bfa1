package raftgrpc

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorate/quorate/internal/await"
)

// A leader's AppendEntries to a follower whose connection is down waits for
// the follower to come back (up to connectWait) instead of failing at once:
// each failure makes raft wait longer before the next try (to 10s), and a
// restarted follower would wait that long to catch up. Heartbeats still
// fail at once.
func TestAppendEntriesWaitsForAPeerComingBack(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := raft.ServerAddress(lis.Addr().String())
	lis.Close() // the follower is down; its address stays reserved for it

	var dials atomic.Int32
	countDials := func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}
	leaderAddr := raft.ServerAddress("127.0.0.1:1") // sends only
	mgr := NewManager(leaderAddr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(countDials))
	defer mgr.Close()
	mgr.connectWait = 20 * time.Second // longer than the test: the follower's return ends the wait
	tr, err := mgr.Transport("g")
	if err != nil {
		t.Fatal(err)
	}
	trans := tr.(*Transport)
	hdr := raft.RPCHeader{ID: []byte("n0"), Addr: []byte(leaderAddr)}

	start := time.Now()
	if err := trans.AppendEntries("n1", target, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1}, &raft.AppendEntriesResponse{}); err == nil {
		t.Fatal("a heartbeat to a peer that is down succeeded")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("a heartbeat to a peer that is down took %v to fail", el)
	}

	done := make(chan error, 1)
	go func() {
		req := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1, PrevLogEntry: 1, PrevLogTerm: 1, LeaderCommitIndex: 1}
		done <- trans.AppendEntries("n1", target, req, &raft.AppendEntriesResponse{})
	}()
	// The connection is tried again and again while the follower is down,
	// gRPC waiting longer before each try: at most a second here, where its
	// default backoff would take 16s to the sixth try and 10s more to the
	// next.
	await.True(t, 5*time.Second, "six tries to connect", func() bool { return dials.Load() >= 6 })
	select {
	case err := <-done:
		t.Fatalf("AppendEntries to a peer that is down ended at once: %v", err)
	default:
	}

	// The follower comes back on its address and answers.
	back, err := net.Listen("tcp", string(target))
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	follower := NewManager(target)
	follower.Register(srv)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(back)
	}()
	defer func() {
		_ = follower.Close()
		srv.Stop()
		<-served
	}()
	ftr, err := follower.Transport("g")
	if err != nil {
		t.Fatal(err)
	}
	defer ftr.(*Transport).Close()
	stop := make(chan struct{})
	answered := make(chan struct{})
	defer func() {
		close(stop)
		<-answered
	}()
	go func() {
		defer close(answered)
		for {
			select {
			case rpc := <-ftr.Consumer():
				rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: true}, nil)
			case <-stop:
				return
			}
		}
	}()

	select {
	case err := <-done:
		if err != nil {
			t.Errorf("AppendEntries once the follower is back: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("AppendEntries still waiting 3s after the follower came back")
	}
}
