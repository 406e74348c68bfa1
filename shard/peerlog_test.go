package shard

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorate/quorate/internal/await"
)

// lockedBuffer is a log's output, read by the test while groups write.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// takeLines returns the lines written since the last call.
func (l *lockedBuffer) takeLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.b.String())
	l.b.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// TestPeerLog feeds a host's raft loggers what hashicorp/raft logs while a
// peer is dead, at fixed instants: one line says the peer is unreachable,
// the rest are counted and summarized every 30s, heartbeats reaching it
// again say so, and other lines pass as raft logs them.
func TestPeerLog(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	now := t0
	var out lockedBuffer
	p := newPeerLog(hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Info, Output: &out, DisableTime: true}),
		func() time.Time { return now }, 30*time.Second)
	p.setNames(map[string]string{"127.0.0.1:7602": "n2"})
	logger := func(group string) hclog.Logger {
		return (&groupLogger{Logger: p.out, group: group, peers: p}).Named(group)
	}
	meta, s0 := logger("meta"), logger("shard-0")
	dialErr := errors.New(`rpc error: code = Unavailable desc = connection error: dial tcp 127.0.0.1:7602: connect: connection refused`)
	n2 := raft.Server{Suffrage: raft.Voter, ID: "n2", Address: "127.0.0.1:7602"}
	heartbeat := func(l hclog.Logger) {
		l.Error("failed to heartbeat to", "peer", n2.Address, "backoff time", 10*time.Millisecond, "error", dialErr)
	}
	expect := func(step string, want ...string) {
		t.Helper()
		got := out.takeLines()
		if len(got) != len(want) {
			t.Fatalf("%s: %d lines %q; want %d", step, len(got), got, len(want))
		}
		for i := range want {
			if !strings.Contains(got[i], want[i]) {
				t.Errorf("%s: line %q; want it to hold %q", step, got[i], want[i])
			}
		}
	}

	heartbeat(s0) // t0: the address is named by its node
	expect("first error", `[ERROR] raft: peer n2 unreachable (first error, shard-0: failed to heartbeat to: `+dialErr.Error()+`); more errors about it are summarized every 30s`)

	// Every kind of failure, from every group, about the same peer: counted.
	for range 50 {
		heartbeat(s0)
		heartbeat(meta)
	}
	s0.Error("failed to appendEntries to", "peer", n2, "error", dialErr)
	s0.Error("failed to pipeline appendEntries", "peer", n2, "error", "append pipeline closed")
	meta.Error("failed to make requestVote RPC", "target", n2, "error", dialErr, "term", 4)
	meta.Warn("failed to contact", "server-id", n2.ID, "time", 300*time.Millisecond)
	// Not about reaching a peer, or below a warning: as raft logs them.
	meta.Warn("heartbeat timeout reached, starting election", "last-leader-addr", n2.Address, "last-leader-id", n2.ID)
	meta.Info("entering candidate state", "node", "x", "term", 5)
	expect("within 30s", `[WARN]  raft.meta: heartbeat timeout reached, starting election: last-leader-addr=127.0.0.1:7602 last-leader-id=n2`)
	if got := p.suppressed.Load(); got != 104 {
		t.Errorf("suppressed %d; want 104", got)
	}

	now = t0.Add(29 * time.Second)
	heartbeat(s0)
	expect("at 29s")
	now = t0.Add(30 * time.Second) // t0+30s: the summary, then silence again
	heartbeat(s0)
	heartbeat(s0)
	expect("at 30s", `[WARN]  raft: peer n2 still unreachable after 30s; 106 more errors suppressed`)

	now = t0.Add(41 * time.Second)
	p.reachable("n2")
	p.reachable("n2") // every group's heartbeats resume: said once
	expect("reachable", `[INFO]  raft: peer n2 reachable again after 41s; 1 more errors suppressed`)

	now = t0.Add(50 * time.Second) // it dies again: a new report
	heartbeat(s0)
	expect("dead again", `[ERROR] raft: peer n2 unreachable (first error, shard-0`)
	now = t0.Add(90 * time.Second) // errors stopped unseen (no longer leading), and start again
	s0.Error("failed to appendEntries to", "peer", n2, "error", dialErr)
	expect("after a quiet spell", `[ERROR] raft: peer n2 unreachable (first error, shard-0: failed to appendEntries to`)
}

// The peers tracked are bounded: past maxDownPeers, errors about more
// peers are logged as raft logs them.
func TestPeerLogBound(t *testing.T) {
	var out lockedBuffer
	p := newPeerLog(hclog.New(&hclog.LoggerOptions{Name: "raft", Output: &out, DisableTime: true}), nil, time.Minute)
	l := &groupLogger{Logger: p.out, group: "shard-0", peers: p}
	for i := range maxDownPeers + 1 {
		l.Error("failed to heartbeat to", "peer", raft.ServerAddress(fmt.Sprintf("10.0.%d.%d:7601", i/256, i%256)), "error", "refused")
	}
	if got := len(p.down); got != maxDownPeers {
		t.Errorf("%d peers tracked; want %d", got, maxDownPeers)
	}
	if got := strings.Count(out.String(), "failed to heartbeat to: peer=10.0.1.0:7601"); got != 1 {
		t.Errorf("the peer past the bound logged %d times as raft does; want 1:\n%s", got, out.String())
	}
}

// TestHostPeerLog runs three hosts for real and stops one: the others say
// once that it is unreachable while raft keeps failing to reach it, and
// that it is reachable again once it is back on its data.
func TestHostPeerLog(t *testing.T) {
	type node struct {
		h    *Host
		srv  *grpc.Server
		addr string
		out  *lockedBuffer
	}
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	var peers []Peer
	var lis []net.Listener
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis = append(lis, l)
		peers = append(peers, Peer{ID: fmt.Sprintf("n%d", i+1), Addr: l.Addr().String()})
	}
	names := map[string]string{}
	for _, p := range peers {
		names[p.Addr] = p.ID
	}
	start := func(i int, l net.Listener) *node {
		n := &node{addr: peers[i].Addr, out: &lockedBuffer{}}
		n.h = NewHost(HostConfig{NodeID: peers[i].ID, Addr: n.addr, DataDir: dirs[i], RaftLog: n.out,
			DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}})
		n.h.SetPeerNames(names)
		n.srv = grpc.NewServer()
		n.h.Serve(n.srv, nil)
		go func() { _ = n.srv.Serve(l) }()
		if err := n.h.Open(); err != nil {
			t.Fatal(err)
		}
		if _, err := n.h.OpenMeta(&listMachine{}, peers); err != nil {
			t.Fatal(err)
		}
		return n
	}
	stop := func(n *node) {
		n.h.Close()
		n.srv.Stop()
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = start(i, lis[i])
	}
	defer func() {
		for _, n := range nodes {
			if n != nil {
				stop(n)
			}
		}
	}()
	await.True(t, 20*time.Second, "a meta leader", func() bool { return nodes[0].h.Meta().LeaderID() != "" })
	leader := nodes[0].h.Meta().LeaderID()
	down := 0 // a node that does not lead
	for i := range nodes {
		if peers[i].ID != leader {
			down = i
			break
		}
	}
	var lead *node
	for i := range nodes {
		if peers[i].ID == leader {
			lead = nodes[i]
		}
	}

	stop(nodes[down])
	nodes[down] = nil
	id := peers[down].ID
	await.True(t, 20*time.Second, "the leader to report "+id+" unreachable", func() bool {
		return strings.Contains(lead.out.String(), "peer "+id+" unreachable (first error, meta: failed to ")
	})
	await.True(t, 20*time.Second, "raft to fail 20 more times", func() bool { return lead.h.SuppressedRaftLogs() >= 20 })
	if s := lead.out.String(); strings.Count(s, "unreachable") != 1 || strings.Contains(s, "raft.meta: failed to") {
		t.Errorf("the leader's raft log, %d errors later:\n%s", lead.h.SuppressedRaftLogs(), s)
	}

	l, err := net.Listen("tcp", peers[down].Addr)
	if err != nil {
		t.Fatal(err)
	}
	nodes[down] = start(down, l)
	await.True(t, 30*time.Second, "the leader to see "+id+" again", func() bool {
		return strings.Contains(lead.out.String(), "peer "+id+" reachable again after ")
	})
}
