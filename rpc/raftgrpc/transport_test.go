package raftgrpc

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Two Raft groups run on the same three nodes, all over each node's single
// gRPC server. Both groups elect, replicate 200 commands each (concurrently,
// so their traffic interleaves on the shared connections) and every replica
// applies exactly its group's commands in order. A node that leads both
// groups still holds one connection per peer. Leadership transfers work.
func TestTwoGroupsOverOnePortEach(t *testing.T) {
	nodes := startNodes(t, 3)
	groups := []string{"shard-1", "shard-2"}
	reps := map[string][]*replica{}
	for _, g := range groups {
		for _, n := range nodes {
			reps[g] = append(reps[g], startReplica(t, n, g, nil))
		}
		bootstrap(t, reps[g])
	}

	// Move both leaderships to n0 (exercising TimeoutNow), so n0 replicates
	// both groups to the same two peers.
	for _, g := range groups {
		transferLeader(t, reps[g], reps[g][0])
	}

	const n = 200
	want := map[string][]string{}
	var wg sync.WaitGroup
	for _, g := range groups {
		for i := range n {
			want[g] = append(want[g], fmt.Sprintf("%s/%03d", g, i))
		}
		leader, cmds := reps[g][0].raft, want[g]
		wg.Go(func() {
			futures := make([]raft.ApplyFuture, 0, n)
			for _, cmd := range cmds {
				futures = append(futures, leader.Apply([]byte(cmd), 5*time.Second))
			}
			for i, f := range futures {
				if err := f.Error(); err != nil {
					t.Errorf("%s: apply %d: %v", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, g := range groups {
		waitApplied(t, g, reps[g], want[g])
	}

	if got := nodes[0].mgr.peerCount(); got != 2 {
		t.Errorf("n0 leads 2 groups over 2 peers with %d connections, want 2", got)
	}
	for _, nd := range nodes {
		if got := nd.mgr.peerCount(); got > len(nodes)-1 {
			t.Errorf("%s has %d connections for %d peers", nd.id, got, len(nodes)-1)
		}
	}
	if got := nodes[0].mgr.pipelines.Load(); got == 0 {
		t.Error("leader never opened an AppendEntries pipeline")
	}

	// A leadership transfer (TimeoutNow, then a vote) moves shard-2 to n1,
	// which then replicates over its own connections.
	g := groups[1]
	transferLeader(t, reps[g], reps[g][1])
	want[g] = append(want[g], g+"/after-transfer")
	if err := reps[g][1].raft.Apply([]byte(want[g][n]), 5*time.Second).Error(); err != nil {
		t.Fatalf("%s: apply on n1: %v", g, err)
	}
	waitApplied(t, g, reps[g], want[g])
}

// A follower that joins after the leader compacted its log catches up by
// InstallSnapshot, streamed in many small chunks.
func TestInstallSnapshotToLateFollower(t *testing.T) {
	nodes := startNodes(t, 3)
	for _, n := range nodes {
		n.mgr.chunkSize = 1000 // a ~30 KB snapshot takes ~30 messages
	}
	tweak := func(c *raft.Config) {
		c.SnapshotThreshold = 16
		c.SnapshotInterval = 50 * time.Millisecond
		c.TrailingLogs = 4
	}
	const g = "shard-9"
	reps := []*replica{startReplica(t, nodes[0], g, tweak), startReplica(t, nodes[1], g, tweak)}
	bootstrap(t, reps)
	leader := waitLeader(t, reps)

	pad := strings.Repeat("x", 250)
	var want []string
	apply := func(from, to int) {
		t.Helper()
		var futures []raft.ApplyFuture
		for i := from; i < to; i++ {
			cmd := fmt.Sprintf("%03d/%s", i, pad)
			want = append(want, cmd)
			futures = append(futures, leader.raft.Apply([]byte(cmd), 5*time.Second))
		}
		for i, f := range futures {
			if err := f.Error(); err != nil {
				t.Fatalf("apply %d: %v", from+i, err)
			}
		}
	}
	apply(0, 100)
	if err := leader.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatalf("snapshot: %v", err)
	}
	first, err := leader.store.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	if first <= 1 {
		t.Fatalf("leader's log starts at %d after a snapshot: not compacted, a new follower would not need InstallSnapshot", first)
	}

	late := startReplica(t, nodes[2], g, tweak)
	if err := leader.raft.AddVoter(nodes[2].id, nodes[2].addr, 0, 5*time.Second).Error(); err != nil {
		t.Fatalf("add voter: %v", err)
	}
	apply(100, 110)
	waitApplied(t, g, append(reps, late), want)
	if _, restores := late.fsm.state(); restores == 0 {
		t.Error("late follower caught up without restoring a snapshot")
	}
}

// A message for a group the receiver does not host fails fast with NotFound,
// on every RPC; a closed group is unknown too.
func TestUnknownGroupFailsFast(t *testing.T) {
	nodes := startNodes(t, 2)
	for _, n := range nodes {
		n.mgr.timeout = 10 * time.Second // a hang would show as DeadlineExceeded
	}
	gone, err := nodes[1].mgr.Transport("gone")
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.(*Transport).Close(); err != nil {
		t.Fatal(err)
	}

	for _, group := range []string{"ghost", "gone"} {
		tr, err := nodes[0].mgr.Transport(group)
		if err != nil {
			t.Fatal(err)
		}
		trans := tr.(*Transport)
		target := nodes[1].addr
		hdr := raft.RPCHeader{ID: []byte("n0"), Addr: []byte(nodes[0].addr)}
		calls := map[string]func() error{
			"AppendEntries": func() error {
				return trans.AppendEntries("n1", target, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1}, &raft.AppendEntriesResponse{})
			},
			"RequestVote": func() error {
				return trans.RequestVote("n1", target, &raft.RequestVoteRequest{RPCHeader: hdr, Term: 1}, &raft.RequestVoteResponse{})
			},
			"RequestPreVote": func() error {
				return trans.RequestPreVote("n1", target, &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: 1}, &raft.RequestPreVoteResponse{})
			},
			"TimeoutNow": func() error {
				return trans.TimeoutNow("n1", target, &raft.TimeoutNowRequest{RPCHeader: hdr}, &raft.TimeoutNowResponse{})
			},
			"InstallSnapshot": func() error {
				data := bytes.Repeat([]byte("s"), 3*defaultChunkSize)
				req := &raft.InstallSnapshotRequest{RPCHeader: hdr, Term: 1, Size: int64(len(data))}
				return trans.InstallSnapshot("n1", target, req, &raft.InstallSnapshotResponse{}, bytes.NewReader(data))
			},
			"AppendEntriesPipeline": func() error {
				p, err := trans.AppendEntriesPipeline("n1", target)
				if err != nil {
					return err
				}
				defer func() { _ = p.Close() }()
				if _, err := p.AppendEntries(&raft.AppendEntriesRequest{RPCHeader: hdr, Term: 1}, &raft.AppendEntriesResponse{}); err != nil {
					return err
				}
				select {
				case f := <-p.Consumer():
					return f.Error()
				case <-time.After(5 * time.Second):
					return errors.New("no pipelined response in 5s")
				}
			},
		}
		for name, call := range calls {
			start := time.Now()
			err := call()
			if code := status.Code(err); code != codes.NotFound {
				t.Errorf("group %q: %s: err = %v (code %v), want NotFound", group, name, err, code)
			}
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("group %q: %s took %v to fail", group, name, el)
			}
		}
	}
}

// An RPC that raft received but has not answered ends with Unavailable when
// the group closes, and when the receiving Manager closes: it does not hang
// until its deadline.
func TestClosingReceiverUnblocksRPC(t *testing.T) {
	nodes := startNodes(t, 2)
	nodes[0].mgr.timeout = 20 * time.Second
	callVote := func(t *testing.T, group string, closeRemote func(*Transport)) {
		t.Helper()
		tr, err := nodes[1].mgr.Transport(group)
		if err != nil {
			t.Fatal(err)
		}
		recv := tr.(*Transport)
		send, err := nodes[0].mgr.Transport(group)
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			errc <- send.RequestVote("n1", nodes[1].addr, &raft.RequestVoteRequest{Term: 1}, &raft.RequestVoteResponse{})
		}()
		select {
		case <-recv.Consumer(): // received, never answered
		case <-time.After(10 * time.Second):
			t.Fatal("request never reached the receiving group")
		}
		closeRemote(recv)
		select {
		case err := <-errc:
			if status.Code(err) != codes.Unavailable {
				t.Errorf("err = %v, want Unavailable", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("RPC still blocked 5s after the receiving side closed")
		}
	}
	t.Run("group closes", func(t *testing.T) {
		callVote(t, "g1", func(tr *Transport) { _ = tr.Close() })
	})
	t.Run("manager closes", func(t *testing.T) {
		callVote(t, "g2", func(*Transport) { _ = nodes[1].mgr.Close() })
	})
}

// Heartbeats take the fast path when raft installs a handler: they are
// answered even though nobody reads Consumer. Other requests are not.
func TestHeartbeatFastPath(t *testing.T) {
	nodes := startNodes(t, 2)
	nodes[0].mgr.timeout = 10 * time.Second
	recv, err := nodes[1].mgr.Transport("hb")
	if err != nil {
		t.Fatal(err)
	}
	var handled int
	recv.SetHeartbeatHandler(func(rpc raft.RPC) {
		handled++ // one at a time: the calls below are sequential
		rpc.Respond(&raft.AppendEntriesResponse{Term: 5, Success: true}, nil)
	})
	send, err := nodes[0].mgr.Transport("hb")
	if err != nil {
		t.Fatal(err)
	}
	hdr := raft.RPCHeader{ID: []byte("n0"), Addr: []byte(nodes[0].addr)}

	var resp raft.AppendEntriesResponse
	if err := send.AppendEntries("n1", nodes[1].addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 5}, &resp); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
	if !resp.Success || resp.Term != 5 || handled != 1 {
		t.Errorf("heartbeat: resp %+v, handler calls %d; want success in term 5 from 1 call", resp, handled)
	}

	// Not a heartbeat: it waits for Consumer, which nobody reads.
	nodes[0].mgr.timeout = 300 * time.Millisecond
	err = send.AppendEntries("n1", nodes[1].addr, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: 5, LeaderCommitIndex: 1}, &resp)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("non-heartbeat with no consumer: err = %v, want DeadlineExceeded", err)
	}
	if handled != 1 {
		t.Errorf("heartbeat handler called %d times, want 1", handled)
	}
}

func TestManagerGroups(t *testing.T) {
	m := NewManager("127.0.0.1:1")
	if _, err := m.Transport(""); !errors.Is(err, ErrEmptyGroup) {
		t.Errorf("empty group: err = %v, want ErrEmptyGroup", err)
	}
	a, err := m.Transport("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Transport("a"); !errors.Is(err, ErrGroupExists) {
		t.Errorf("duplicate group: err = %v, want ErrGroupExists", err)
	}
	if a.LocalAddr() != "127.0.0.1:1" {
		t.Errorf("LocalAddr = %q", a.LocalAddr())
	}
	if got := a.DecodePeer(a.EncodePeer("x", "10.0.0.2:7")); got != "10.0.0.2:7" {
		t.Errorf("peer round trip = %q", got)
	}
	// Closing a transport frees its group, as a shard restart needs; closing
	// the stale one again must not unregister the new one.
	_ = a.(*Transport).Close()
	a2, err := m.Transport("a")
	if err != nil {
		t.Fatalf("re-register after close: %v", err)
	}
	_ = a.(*Transport).Close()
	if _, err := m.lookup("a"); err != nil {
		t.Errorf("second Close of the old transport unregistered the new one: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Transport("b"); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
	if err := a2.RequestVote("x", "127.0.0.1:1", &raft.RequestVoteRequest{}, &raft.RequestVoteResponse{}); !errors.Is(err, raft.ErrTransportShutdown) {
		t.Errorf("RPC on closed manager: err = %v, want ErrTransportShutdown", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
