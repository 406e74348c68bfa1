package raftgrpc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// heartbeatReq is the heartbeat raft's leader sends from node in term.
func heartbeatReq(node *testNode, term uint64) *raft.AppendEntriesRequest {
	return &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(node.id), Addr: []byte(node.addr)},
		Term:      term,
		Leader:    []byte(node.addr), //lint:ignore SA1019 raft's heartbeat() still sets it.
	}
}

// Forty groups' heartbeats to one peer all travel on one stream, coalesced
// into few messages, and each gets its own group's answer, whichever way the
// peer answers it: raft's handler answering at once, a handler answering
// later (so answers come back out of order), or no handler at all (the
// consumer channel).
func TestHeartbeatsShareOneStream(t *testing.T) {
	nodes := startNodes(t, 2)
	sender, peer := nodes[0], nodes[1]
	sender.mgr.hbWindow = 20 * time.Millisecond // make coalescing certain

	const groups, rounds = 40, 5
	answer := func(group int, req *raft.AppendEntriesRequest) *raft.AppendEntriesResponse {
		// Everything in the answer names its group and echoes the request.
		return &raft.AppendEntriesResponse{
			RPCHeader: raft.RPCHeader{ID: []byte(peer.id), Addr: []byte(peer.addr)},
			Term:      req.Term, LastLog: uint64(1000 + group), Success: group%2 == 0,
		}
	}
	var answerers sync.WaitGroup
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); answerers.Wait() }) // before the managers close
	send := make([]raft.Transport, groups)
	for g := range groups {
		name := fmt.Sprintf("g%02d", g)
		recv, err := peer.mgr.Transport(name)
		if err != nil {
			t.Fatal(err)
		}
		check := func(rpc raft.RPC) *raft.AppendEntriesResponse {
			req, ok := rpc.Command.(*raft.AppendEntriesRequest)
			if !ok {
				t.Fatalf("%s: got %T", name, rpc.Command)
			}
			leader := req.Leader //lint:ignore SA1019 the deprecated field must survive the stream.
			if string(req.ID) != string(sender.id) || string(req.Addr) != string(sender.addr) ||
				string(leader) != string(sender.addr) || req.ProtocolVersion != raft.ProtocolVersionMax || !isHeartbeat(req) {
				t.Errorf("%s: heartbeat arrived as %+v", name, req)
			}
			return answer(g, req)
		}
		switch g % 3 {
		case 0: // no handler: the consumer channel
			answerers.Go(func() {
				for {
					select {
					case rpc := <-recv.Consumer():
						rpc.Respond(check(rpc), nil)
					case <-stop:
						return
					}
				}
			})
		case 1: // the fast path answers at once
			recv.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(check(rpc), nil) })
		case 2: // the fast path answers later
			recv.SetHeartbeatHandler(func(rpc raft.RPC) {
				resp := check(rpc)
				answerers.Go(func() {
					// A late answer is the behaviour under test.
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
					rpc.Respond(resp, nil)
				})
			})
		}
		if send[g], err = sender.mgr.Transport(name); err != nil {
			t.Fatal(err)
		}
	}

	for round := range rounds {
		var wg sync.WaitGroup
		for g := range groups {
			wg.Go(func() {
				term := uint64(1 + round*groups + g)
				var resp raft.AppendEntriesResponse
				if err := send[g].AppendEntries(peer.id, peer.addr, heartbeatReq(sender, term), &resp); err != nil {
					t.Errorf("g%02d round %d: %v", g, round, err)
					return
				}
				want := answer(g, heartbeatReq(sender, term))
				if resp.Term != want.Term || resp.LastLog != want.LastLog || resp.Success != want.Success ||
					string(resp.ID) != string(peer.id) || string(resp.Addr) != string(peer.addr) {
					t.Errorf("g%02d round %d: answer %+v, want %+v", g, round, resp, *want)
				}
			})
		}
		wg.Wait()
	}
	if t.Failed() {
		t.FailNow()
	}
	if got := sender.mgr.hbStreams.Load(); got != 1 {
		t.Errorf("heartbeat streams opened = %d, want 1 for one peer", got)
	}
	sent, batches := sender.mgr.hbAnswered.Load(), sender.mgr.hbBatches.Load()
	if sent != groups*rounds {
		t.Errorf("%d heartbeats were answered on the stream, want all %d", sent, groups*rounds)
	}
	if batches >= sent/4 {
		t.Errorf("%d heartbeats in %d messages: not coalesced", sent, batches)
	}
	t.Logf("%d heartbeats in %d messages", sent, batches)
}

// restartableNode is a node whose gRPC server can stop and start again on
// the same address, keeping its Manager.
type restartableNode struct {
	testNode
	mu     sync.Mutex
	srv    *grpc.Server
	served chan struct{}
}

func startRestartable(t *testing.T) *restartableNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := raft.ServerAddress(lis.Addr().String())
	n := &restartableNode{testNode: testNode{id: "r", addr: addr, mgr: NewManager(addr)}}
	n.serve(lis)
	t.Cleanup(func() {
		n.stop()
		if err := n.mgr.Close(); err != nil {
			t.Errorf("close manager: %v", err)
		}
	})
	return n
}

func (n *restartableNode) serve(lis net.Listener) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.srv = grpc.NewServer()
	n.mgr.Register(n.srv)
	n.served = make(chan struct{})
	srv, served := n.srv, n.served
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
}

// stop stops the server: every connection to it breaks.
func (n *restartableNode) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Stop()
		<-n.served
		n.srv = nil
	}
}

func (n *restartableNode) restart(t *testing.T) {
	t.Helper()
	var lis net.Listener
	await.True(t, 5*time.Second, "the port to be free again", func() bool {
		var err error
		lis, err = net.Listen("tcp", string(n.addr))
		return err == nil
	})
	n.serve(lis)
}

// A heartbeat in flight when its stream breaks fails at once, like a failed
// RPC, rather than hanging until its deadline; once the peer is back, the
// next heartbeats open a new stream and are answered.
func TestHeartbeatStreamReopens(t *testing.T) {
	nodes := startNodes(t, 1)
	sender := nodes[0]
	sender.mgr.timeout = 30 * time.Second // a hang would show
	peer := startRestartable(t)

	held := make(chan raft.RPC, 1) // heartbeats of "slow" are never answered
	for _, g := range []string{"fast", "slow"} {
		recv, err := peer.mgr.Transport(g)
		if err != nil {
			t.Fatal(err)
		}
		recv.SetHeartbeatHandler(func(rpc raft.RPC) {
			if g == "slow" {
				held <- rpc
				return
			}
			rpc.Respond(&raft.AppendEntriesResponse{Term: rpc.Command.(*raft.AppendEntriesRequest).Term, Success: true}, nil)
		})
	}
	fast, err := sender.mgr.Transport("fast")
	if err != nil {
		t.Fatal(err)
	}
	slow, err := sender.mgr.Transport("slow")
	if err != nil {
		t.Fatal(err)
	}
	heartbeat := func(tr raft.Transport, term uint64) error {
		var resp raft.AppendEntriesResponse
		err := tr.AppendEntries(peer.id, peer.addr, heartbeatReq(sender, term), &resp)
		if err == nil && (resp.Term != term || !resp.Success) {
			return fmt.Errorf("answer %+v to term %d", resp, term)
		}
		return err
	}
	if err := heartbeat(fast, 1); err != nil {
		t.Fatalf("first heartbeat: %v", err)
	}

	errc := make(chan error, 1)
	go func() { errc <- heartbeat(slow, 2) }()
	select {
	case <-held: // in flight, never to be answered
	case <-time.After(10 * time.Second):
		t.Fatal("the slow group's heartbeat never arrived")
	}
	start := time.Now()
	peer.stop()
	select {
	case err := <-errc:
		if code := status.Code(err); code != codes.Unavailable {
			t.Errorf("heartbeat on a broken stream: err = %v (code %v), want Unavailable", err, code)
		}
		t.Logf("failed after %v: %v", time.Since(start), err)
	case <-time.After(5 * time.Second):
		t.Fatal("heartbeat still waiting 5s after its stream broke")
	}
	if err := heartbeat(fast, 3); status.Code(err) != codes.Unavailable {
		t.Errorf("heartbeat to a stopped peer: err = %v, want Unavailable", err)
	}

	peer.restart(t)
	await.True(t, 15*time.Second, "heartbeats to be answered again", func() bool {
		return heartbeat(fast, 4) == nil
	})
	if got := sender.mgr.hbStreams.Load(); got != 2 {
		t.Errorf("heartbeat streams opened = %d, want 2 (one reopened)", got)
	}
}

// A peer of an older version, without the Heartbeats RPC, still gets every
// heartbeat, as unary AppendEntries; the stream is tried again later, and
// used once the peer has it.
func TestHeartbeatFallbackToUnary(t *testing.T) {
	nodes := startNodes(t, 1)
	sender := nodes[0]
	sender.mgr.hbUnary = 2 * time.Second // long enough for the five heartbeats below on a busy machine
	peer := startRestartable(t)

	// The peer runs without Heartbeats: its service as an older build
	// registered it, Heartbeats being unknown to it.
	peer.stop()
	lis, err := net.Listen("tcp", string(peer.addr))
	if err != nil {
		t.Fatal(err)
	}
	old := grpc.NewServer()
	desc := quoratev1.RaftTransport_ServiceDesc
	desc.Streams = slices.DeleteFunc(slices.Clone(desc.Streams), func(s grpc.StreamDesc) bool {
		return s.StreamName == "Heartbeats"
	})
	old.RegisterService(&desc, &server{m: peer.mgr})
	oldServed := make(chan struct{})
	go func() {
		defer close(oldServed)
		_ = old.Serve(lis)
	}()

	var mu sync.Mutex
	handled := 0
	recv, err := peer.mgr.Transport("g")
	if err != nil {
		t.Fatal(err)
	}
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		mu.Lock()
		handled++
		mu.Unlock()
		rpc.Respond(&raft.AppendEntriesResponse{Term: rpc.Command.(*raft.AppendEntriesRequest).Term, Success: true}, nil)
	})
	send, err := sender.mgr.Transport("g")
	if err != nil {
		t.Fatal(err)
	}
	for term := uint64(1); term <= 5; term++ {
		var resp raft.AppendEntriesResponse
		if err := send.AppendEntries(peer.id, peer.addr, heartbeatReq(sender, term), &resp); err != nil {
			t.Fatalf("heartbeat %d to an old peer: %v", term, err)
		}
		if resp.Term != term || !resp.Success {
			t.Fatalf("heartbeat %d to an old peer: answer %+v", term, resp)
		}
	}
	mu.Lock()
	if handled != 5 {
		t.Errorf("old peer handled %d heartbeats, want 5", handled)
	}
	mu.Unlock()
	if got := sender.mgr.hbStreams.Load(); got != 1 {
		t.Errorf("heartbeat streams opened = %d, want 1: the stream is not retried at once", got)
	}
	if got := sender.mgr.hbAnswered.Load(); got != 0 {
		t.Errorf("%d heartbeats answered on a stream the peer does not have", got)
	}

	// The peer is upgraded: after hbUnary, heartbeats use the stream.
	old.Stop()
	<-oldServed
	peer.restart(t)
	await.True(t, 15*time.Second, "heartbeats on the stream after the upgrade", func() bool {
		var resp raft.AppendEntriesResponse
		err := send.AppendEntries(peer.id, peer.addr, heartbeatReq(sender, 9), &resp)
		return err == nil && sender.mgr.hbAnswered.Load() > 0
	})
}

// A heartbeat for a group the peer does not host is answered NotFound at
// once, on the stream, without breaking it for other groups.
func TestHeartbeatUnknownGroup(t *testing.T) {
	nodes := startNodes(t, 2)
	nodes[0].mgr.timeout = 20 * time.Second // a hang would show
	recv, err := nodes[1].mgr.Transport("known")
	if err != nil {
		t.Fatal(err)
	}
	recv.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil) })
	ghost, err := nodes[0].mgr.Transport("ghost")
	if err != nil {
		t.Fatal(err)
	}
	known, err := nodes[0].mgr.Transport("known")
	if err != nil {
		t.Fatal(err)
	}
	for i, tr := range []raft.Transport{ghost, known, ghost} {
		start := time.Now()
		err := tr.AppendEntries(nodes[1].id, nodes[1].addr, heartbeatReq(nodes[0], 1), &raft.AppendEntriesResponse{})
		switch {
		case tr == ghost && status.Code(err) != codes.NotFound:
			t.Errorf("heartbeat %d, for an unknown group: err = %v, want NotFound", i, err)
		case tr == known && err != nil:
			t.Errorf("heartbeat %d, for a known group after a NotFound: %v", i, err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("heartbeat %d took %v", i, el)
		}
	}
	if sent, streams := nodes[0].mgr.hbAnswered.Load(), nodes[0].mgr.hbStreams.Load(); sent != 3 || streams != 1 {
		t.Errorf("%d heartbeats on %d streams, want 3 on 1", sent, streams)
	}
}

// The first heartbeat of a new term, which raft answers only after writing
// the term to disk, does not hold up other groups' heartbeats on the
// stream; heartbeats of a term already answered are answered in line.
func TestHeartbeatNewTermDoesNotBlockStream(t *testing.T) {
	nodes := startNodes(t, 2)
	sender, peer := nodes[0], nodes[1]
	sender.mgr.timeout = 3 * time.Second
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the managers close
	var mu sync.Mutex
	persisted := map[string]uint64{}   // the term each group has on "disk"
	slowReached := make(chan struct{}) // closed once the slow group's handler blocks
	var reachedOnce sync.Once
	for _, g := range []string{"slow", "fast"} {
		recv, err := peer.mgr.Transport(g)
		if err != nil {
			t.Fatal(err)
		}
		recv.SetHeartbeatHandler(func(rpc raft.RPC) {
			term := rpc.Command.(*raft.AppendEntriesRequest).Term
			mu.Lock()
			newTerm := term > persisted[g]
			persisted[g] = max(persisted[g], term)
			mu.Unlock()
			if newTerm && g == "slow" {
				reachedOnce.Do(func() { close(slowReached) })
				<-release // a slow disk
			}
			rpc.Respond(&raft.AppendEntriesResponse{Term: term, Success: true}, nil)
		})
	}
	slow, err := sender.mgr.Transport("slow")
	if err != nil {
		t.Fatal(err)
	}
	fast, err := sender.mgr.Transport("fast")
	if err != nil {
		t.Fatal(err)
	}
	heartbeat := func(tr raft.Transport, term uint64) error {
		return tr.AppendEntries(peer.id, peer.addr, heartbeatReq(sender, term), &raft.AppendEntriesResponse{})
	}

	slowDone := make(chan error, 1)
	go func() { slowDone <- heartbeat(slow, 7) }()
	<-slowReached // it blocks the slow group's handler first
	for i := range 3 {
		start := time.Now()
		if err := heartbeat(fast, 7); err != nil {
			t.Fatalf("fast heartbeat %d: %v", i, err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("fast heartbeat %d took %v while another group persisted its term", i, el)
		}
	}
	select {
	case err := <-slowDone:
		t.Fatalf("slow heartbeat answered before its term was persisted: %v", err)
	default:
	}
	unblock()
	if err := <-slowDone; err != nil {
		t.Fatalf("slow heartbeat: %v", err)
	}
	// Now term 7 is the slow group's: its heartbeats are answered in line.
	if err := heartbeat(slow, 7); err != nil {
		t.Fatal(err)
	}
	if got := peer.mgr.groupTransport(t, "slow").hbTerm.Load(); got != 7 {
		t.Errorf("slow group's answered term = %d, want 7", got)
	}
}

// groupTransport returns the open transport of group.
func (m *Manager) groupTransport(t *testing.T, group string) *Transport {
	t.Helper()
	tr, err := m.lookup(group)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Sparse heartbeats to a peer go out at once; dense ones (many groups) wait
// the gather window so that those due together share a message.
func TestHeartbeatGatherWindow(t *testing.T) {
	nodes := startNodes(t, 2)
	sender, peer := nodes[0], nodes[1]
	sender.mgr.hbWindow = 20 * time.Millisecond
	const groups = 20
	send := make([]raft.Transport, groups)
	for g := range groups {
		name := fmt.Sprintf("g%d", g)
		recv, err := peer.mgr.Transport(name)
		if err != nil {
			t.Fatal(err)
		}
		recv.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil) })
		if send[g], err = sender.mgr.Transport(name); err != nil {
			t.Fatal(err)
		}
	}
	heartbeat := func(g int) {
		if err := send[g].AppendEntries(peer.id, peer.addr, heartbeatReq(sender, 1), &raft.AppendEntriesResponse{}); err != nil {
			t.Errorf("g%d: %v", g, err)
		}
	}

	// Sparse: one every 100ms, five times the window. The spacing is what
	// is under test, so it is a sleep.
	for g := range 5 {
		heartbeat(g)
		time.Sleep(100 * time.Millisecond)
	}
	if got := sender.mgr.hbGathers.Load(); got != 0 {
		t.Errorf("sparse heartbeats waited %d gather windows, want none", got)
	}

	// Dense: every group at once, a few rounds.
	for range 5 {
		var wg sync.WaitGroup
		for g := range groups {
			wg.Go(func() { heartbeat(g) })
		}
		wg.Wait()
	}
	gathers, batches := sender.mgr.hbGathers.Load(), sender.mgr.hbBatches.Load()
	if gathers == 0 {
		t.Errorf("dense heartbeats never waited for others")
	}
	t.Logf("%d heartbeats in %d messages, %d gather windows", sender.mgr.hbAnswered.Load(), batches, gathers)
}

// A node's graceful stop must not wait for its peers' long-lived streams:
// once its Manager is closed, the heartbeat stream a live peer holds open
// to it ends, and GracefulStop returns at once instead of waiting for the
// peer to go.
func TestCloseEndsPeerStreams(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := raft.ServerAddress(lis.Addr().String())
	srv := grpc.NewServer()
	server := NewManager(addr)
	server.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	recv, err := server.Transport("g")
	if err != nil {
		t.Fatal(err)
	}
	recv.SetHeartbeatHandler(func(rpc raft.RPC) { rpc.Respond(&raft.AppendEntriesResponse{Success: true}, nil) })

	peer := startNodes(t, 1)[0]
	send, err := peer.mgr.Transport("g")
	if err != nil {
		t.Fatal(err)
	}
	if err := send.AppendEntries("srv", addr, heartbeatReq(peer, 1), &raft.AppendEntriesResponse{}); err != nil {
		t.Fatal(err)
	}
	if n := peer.mgr.hbStreams.Load(); n != 1 {
		t.Fatalf("%d heartbeat streams open, want 1", n)
	}
	server.Close()
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("GracefulStop still waiting for the peer's heartbeat stream 3s after Close")
	}
}
