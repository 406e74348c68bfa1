package raftgrpc

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/internal/await"
)

// testNode is one node of a test cluster: a gRPC server on a free loopback
// port with a Manager registered on it.
type testNode struct {
	id   raft.ServerID
	addr raft.ServerAddress
	mgr  *Manager
}

// startNodes starts n nodes. Their cleanup runs after that of any raft
// started later in the test (t.Cleanup is last-in, first-out).
func startNodes(t *testing.T, n int) []*testNode {
	t.Helper()
	nodes := make([]*testNode, n)
	for i := range nodes {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := raft.ServerAddress(lis.Addr().String())
		srv := grpc.NewServer()
		mgr := NewManager(addr)
		mgr.Register(srv)
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = srv.Serve(lis)
		}()
		t.Cleanup(func() {
			if err := mgr.Close(); err != nil {
				t.Errorf("close manager %s: %v", addr, err)
			}
			srv.Stop()
			<-served
		})
		nodes[i] = &testNode{id: raft.ServerID(fmt.Sprintf("n%d", i)), addr: addr, mgr: mgr}
	}
	return nodes
}

// testFSM records the commands it applies, in order. Its snapshot is the
// list as JSON.
type testFSM struct {
	mu       sync.Mutex
	cmds     []string
	restores int
}

func (f *testFSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = append(f.cmds, string(l.Data))
	return len(f.cmds)
}

func (f *testFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return testSnapshot(append([]string(nil), f.cmds...)), nil
}

func (f *testFSM) Restore(rc io.ReadCloser) error {
	defer func() { _ = rc.Close() }()
	var cmds []string
	if err := json.NewDecoder(rc).Decode(&cmds); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cmds = cmds
	f.restores++
	return nil
}

func (f *testFSM) state() (cmds []string, restores int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...), f.restores
}

type testSnapshot []string

func (s testSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode([]string(s)); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (testSnapshot) Release() {}

// replica is one raft instance of a group.
type replica struct {
	node  *testNode
	raft  *raft.Raft
	fsm   *testFSM
	store *raftboltdb.BoltStore
}

// fastConfig is raft's config with timings for loopback tests.
func fastConfig(t *testing.T, id raft.ServerID, group string) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	// Fast enough for a quick test, loose enough that a leader keeps its
	// lease under -race on two busy cores (other packages' fuzzers and tests
	// share the machine); leadership transfers do not wait for timeouts.
	c.HeartbeatTimeout = time.Second
	c.ElectionTimeout = time.Second
	c.LeaderLeaseTimeout = time.Second
	c.CommitTimeout = 5 * time.Millisecond
	c.Logger = hclog.New(&hclog.LoggerOptions{
		Name:   fmt.Sprintf("%s/%s", group, id),
		Level:  hclog.Warn,
		Output: tWriter{t},
	})
	return c
}

// tWriter sends raft's log lines to t.Log, shown on failure or with -v.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startReplica starts group's raft on node with a bolt store and a file
// snapshot store in a temporary directory; tweak adjusts the config.
func startReplica(t *testing.T, node *testNode, group string, tweak func(*raft.Config)) *replica {
	t.Helper()
	dir := t.TempDir()
	// NoSync: durability is not under test, and fsync on a busy CI disk
	// would only make timings flaky.
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	trans, err := node.mgr.Transport(group)
	if err != nil {
		t.Fatal(err)
	}
	conf := fastConfig(t, node.id, group)
	if tweak != nil {
		tweak(conf)
	}
	fsm := &testFSM{}
	r, err := raft.NewRaft(conf, fsm, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("shutdown %s/%s: %v", group, node.id, err)
		}
		_ = store.Close()
	})
	return &replica{node: node, raft: r, fsm: fsm, store: store}
}

// bootstrap makes every replica a voter of the group's first configuration.
func bootstrap(t *testing.T, reps []*replica) {
	t.Helper()
	var cfg raft.Configuration
	for _, r := range reps {
		cfg.Servers = append(cfg.Servers, raft.Server{ID: r.node.id, Address: r.node.addr})
	}
	for _, r := range reps {
		if err := r.raft.BootstrapCluster(cfg).Error(); err != nil {
			t.Fatalf("bootstrap %s: %v", r.node.id, err)
		}
	}
}

// waitLeader returns the group's leader once exactly one replica leads.
func waitLeader(t *testing.T, reps []*replica) *replica {
	t.Helper()
	var leader *replica
	await.True(t, 15*time.Second, "a leader", func() bool {
		leader = nil
		for _, r := range reps {
			if r.raft.State() == raft.Leader {
				if leader != nil {
					return false
				}
				leader = r
			}
		}
		return leader != nil
	})
	return leader
}

// waitLeaderIs waits until want is the group's only leader. A leadership
// transfer's future completes when TimeoutNow is answered, before the old
// leader steps down.
func waitLeaderIs(t *testing.T, reps []*replica, want *replica) {
	t.Helper()
	await.True(t, 15*time.Second, fmt.Sprintf("%s to lead alone", want.node.id), func() bool {
		for _, r := range reps {
			if (r.raft.State() == raft.Leader) != (r == want) {
				return false
			}
		}
		return true
	})
}

// transferLeader makes to the group's leader, by a leadership transfer
// (TimeoutNow, then an election) unless it already leads. A transfer that
// fails because leadership moved meanwhile is retried.
func transferLeader(t *testing.T, reps []*replica, to *replica) {
	t.Helper()
	await.Until(t, 15*time.Second, func() error {
		leader := waitLeader(t, reps)
		if leader == to {
			return nil
		}
		err := leader.raft.LeadershipTransferToServer(to.node.id, to.node.addr).Error()
		if err != nil {
			t.Logf("transfer leadership to %s: %v; retrying", to.node.id, err)
			return fmt.Errorf("transfer leadership to %s: %w", to.node.id, err)
		}
		return nil
	})
	waitLeaderIs(t, reps, to)
}

// waitApplied waits until every replica's FSM holds exactly want.
func waitApplied(t *testing.T, group string, reps []*replica, want []string) {
	t.Helper()
	for _, r := range reps {
		await.True(t, 10*time.Second, fmt.Sprintf("%s/%s to apply %d commands", group, r.node.id, len(want)), func() bool {
			got, _ := r.fsm.state()
			return len(got) >= len(want)
		})
		got, _ := r.fsm.state()
		if len(got) != len(want) {
			t.Fatalf("%s/%s applied %d commands, want %d", group, r.node.id, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s/%s command %d = %q, want %q", group, r.node.id, i, got[i], want[i])
			}
		}
	}
}
