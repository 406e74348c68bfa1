package shard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"google.golang.org/grpc"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/rpc/raftgrpc"
)

// node is one test node: a gRPC server carrying the Raft traffic of its shard.
type node struct {
	id   raft.ServerID
	addr raft.ServerAddress
	lis  net.Listener
	srv  *grpc.Server
	mgr  *raftgrpc.Manager
	dir  string
	sh   *Shard
}

func startNode(t *testing.T, id raft.ServerID, lis net.Listener, dir string) *node {
	t.Helper()
	n := &node{id: id, addr: raft.ServerAddress(lis.Addr().String()), lis: lis, dir: dir}
	n.srv = grpc.NewServer()
	n.mgr = raftgrpc.NewManager(n.addr)
	n.mgr.Register(n.srv)
	go func() { _ = n.srv.Serve(lis) }()
	trans, err := n.mgr.Transport("shard-0")
	if err != nil {
		t.Fatal(err)
	}
	n.sh, err = Open(Config{
		GroupConfig: GroupConfig{ID: "shard-0", NodeID: id, Dir: dir, Transport: trans,
			Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Error})},
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) stop(t *testing.T) {
	t.Helper()
	if err := n.sh.Close(); err != nil && !errors.Is(err, raft.ErrRaftShutdown) {
		t.Errorf("close %s: %v", n.id, err)
	}
	n.mgr.Close()
	n.srv.Stop()
}

// startGroup starts three replicas of one shard and bootstraps them.
func startGroup(t *testing.T, dirs []string, listeners []net.Listener) []*node {
	t.Helper()
	nodes := make([]*node, 3)
	var servers []raft.Server
	for i := range nodes {
		nodes[i] = startNode(t, raft.ServerID(fmt.Sprint("n", i)), listeners[i], dirs[i])
		servers = append(servers, raft.Server{ID: nodes[i].id, Address: nodes[i].addr})
	}
	for _, n := range nodes {
		if err := n.sh.Bootstrap(servers); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	var lis net.Listener
	var err error
	// A just-closed port may linger briefly.
	await.Until(t, 5*time.Second, func() error {
		lis, err = net.Listen("tcp", addr)
		return err
	})
	return lis
}

func leader(t *testing.T, nodes []*node) *node {
	t.Helper()
	var l *node
	await.True(t, 15*time.Second, "a leader to be elected", func() bool {
		for _, n := range nodes {
			if n != nil && n.sh.IsLeader() {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

var limit100 = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 100, Period: time.Hour}

func take(key string) []fsm.Op {
	return []fsm.Op{{Kind: fsm.OpTake, Key: key, Limit: limit100, Cost: 1}}
}

type countingObserver struct{ batches, ops atomic.Int64 }

func (o *countingObserver) Batch(ops int, _ time.Duration) {
	o.batches.Add(1)
	o.ops.Add(int64(ops))
}

func TestShardReplicatesBatchesAndSurvivesRestart(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	lis := []net.Listener{listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")}
	addrs := []string{lis[0].Addr().String(), lis[1].Addr().String(), lis[2].Addr().String()}
	nodes := startGroup(t, dirs, lis)
	obs := &countingObserver{}
	l := leader(t, nodes)
	l.sh.cfg.Observer = obs

	// 300 concurrent takes against a limit of 100: exactly 100 allowed,
	// sharing far fewer log entries than requests.
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := l.sh.Submit(context.Background(), take("k"), false)
			if err != nil {
				t.Error(err)
				return
			}
			if a.Results[0].Allowed {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	if allowed.Load() != 100 {
		t.Fatalf("allowed %d of 300 against a limit of 100", allowed.Load())
	}
	if b := obs.batches.Load(); b >= 300 || obs.ops.Load() != 300 {
		t.Fatalf("300 ops in %d batches (ops %d): no group commit", b, obs.ops.Load())
	}
	t.Logf("300 ops in %d log entries", obs.batches.Load())

	// Followers refuse; atomic requests are all-or-nothing.
	for _, n := range nodes {
		if n != l {
			if _, err := n.sh.Submit(context.Background(), take("k"), false); !errors.Is(err, ErrNotLeader) {
				t.Fatalf("follower Submit: %v, want ErrNotLeader", err)
			}
		}
	}
	a, err := l.sh.Submit(context.Background(), append(take("other"), take("k")...), true)
	if err != nil || !a.Results[0].Refunded || a.Results[1].Allowed {
		t.Fatalf("atomic submit: %+v %v", a.Results, err)
	}

	// Full restart from disk: the bucket is still spent.
	for _, n := range nodes {
		n.stop(t)
	}
	for i := range lis {
		lis[i] = listen(t, addrs[i])
	}
	nodes = startGroup(t, dirs, lis)
	defer func() {
		for _, n := range nodes {
			n.stop(t)
		}
	}()
	var res Applied
	await.Until(t, 15*time.Second, func() error {
		res, err = leader(t, nodes).sh.Submit(context.Background(), take("other"), false)
		return err
	})
	if got := res.Results[0].Remaining; got != 99 {
		t.Fatalf("after restart %q has %d remaining, want 99 (the atomic take was refunded, one now)", "other", got)
	}
	if res, err := leader(t, nodes).sh.Submit(context.Background(), take("k"), false); err != nil || res.Results[0].Allowed {
		t.Fatalf("after restart the spent bucket allowed: %+v %v", res, err)
	}
}

func TestShardLeaderFailover(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	lis := []net.Listener{listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")}
	nodes := startGroup(t, dirs, lis)
	l := leader(t, nodes)
	for range 10 {
		if _, err := l.sh.Submit(context.Background(), take("k"), false); err != nil {
			t.Fatal(err)
		}
	}
	l.stop(t)
	var rest []*node
	for _, n := range nodes {
		if n != l {
			rest = append(rest, n)
		}
	}
	defer func() {
		for _, n := range rest {
			n.stop(t)
		}
	}()
	var a Applied
	await.Until(t, 15*time.Second, func() error {
		var err error
		a, err = leader(t, rest).sh.Submit(context.Background(), take("k"), false)
		return err
	})
	if a.Results[0].Remaining != 89 {
		t.Fatalf("new leader sees %d remaining, want 89", a.Results[0].Remaining)
	}
}

func TestMachineFSMSkipsGarbage(t *testing.T) {
	a := &machineFSM{m: fsm.New(fsm.Config{})}
	out := a.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: []byte("garbage")},
		{Index: 2, Type: raft.LogConfiguration},
		{Index: 3, Type: raft.LogCommand, Data: fsm.AppendCommand(nil, &fsm.Command{Now: 1, Ops: take("k")})},
	})
	if r := out[0].(*applied); r.err == nil {
		t.Fatal("garbage entry applied without error")
	}
	if out[1] != nil {
		t.Fatal("configuration entry produced a result")
	}
	if r := out[2].(*applied); r.err != nil || !r.results[0].Allowed || r.index != 3 {
		t.Fatalf("good entry: %+v", r)
	}
}
