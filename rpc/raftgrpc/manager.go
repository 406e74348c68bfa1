package raftgrpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/rpc/quoratev1"
)

var (
	// ErrClosed is returned by Manager.Transport after Manager.Close.
	ErrClosed = errors.New("raftgrpc: manager closed")
	// ErrGroupExists is returned by Manager.Transport for a group that already
	// has an open transport on this node.
	ErrGroupExists = errors.New("raftgrpc: group already has a transport")
	// ErrEmptyGroup is returned by Manager.Transport for the empty group name.
	ErrEmptyGroup = errors.New("raftgrpc: empty group name")
)

const (
	// defaultTimeout bounds each unary RPC and each pipelined response, like
	// NetworkTransport's timeout.
	defaultTimeout = 10 * time.Second
	// snapshotTimeoutScale stretches the InstallSnapshot deadline by one
	// timeout per this many bytes of snapshot, as NetworkTransport does.
	snapshotTimeoutScale = 256 << 10
	// defaultChunkSize is the snapshot bytes per InstallSnapshot message:
	// well under gRPC's default 4 MiB message limit.
	defaultChunkSize = 256 << 10
	// pipelineMaxInFlight is how many pipelined AppendEntries may await their
	// response before AppendPipeline.AppendEntries blocks.
	pipelineMaxInFlight = 16
	// streamWindow and connWindow are the static HTTP/2 flow-control
	// windows of the raft connections (see flowControlDialOptions).
	streamWindow = 4 << 20
	connWindow   = 16 << 20
	// defaultConnectWait is how long an AppendEntries to a peer whose
	// connection is down waits for it to come back before failing. Raft
	// backs off exponentially after each failed AppendEntries (10ms doubling
	// to 10.24s, per follower and group, not configurable) and a failure
	// while the connection is down is immediate: after 20s down every group
	// retried a restarted follower only every 10s, so it waited up to that
	// long to learn the commit index and catch up (quorate's /readyz waits
	// for the meta group's). Waiting here counts a failure per connectWait
	// at most, so a follower back within about 40s is caught up within about
	// a second. Heartbeats do not wait: they keep raft's view of the peer
	// fresh. What it costs: a group shutting down while a peer is down waits
	// for this to end.
	defaultConnectWait = 3 * time.Second
	// defaultHeartbeatWindow is how long the first heartbeat to a peer waits
	// for others due at about the same time before they go out as one
	// message on the peer's heartbeat stream, when heartbeats to the peer
	// are dense enough for a wait to be worth it (see heartbeater).
	defaultHeartbeatWindow = 2 * time.Millisecond
	// defaultUnaryHeartbeats is how long heartbeats to a peer that answered
	// the heartbeat stream with Unimplemented (an older version) go as unary
	// AppendEntries before the stream is tried again.
	defaultUnaryHeartbeats = time.Minute
)

// Manager is a node's side of the RaftTransport service: it hands each Raft
// group its raft.Transport, dispatches incoming messages to the group they
// name, and keeps one client connection per peer address for all groups.
//
// A Manager is safe for concurrent use. Its group and peer tables are guarded
// by mu; everything else is set at construction (the timeout and chunk size
// are changed only by tests, before use).
type Manager struct {
	localAddr raft.ServerAddress
	dialOpts  []grpc.DialOption
	timeout   time.Duration
	chunkSize int
	// connectWait bounds how long an AppendEntries waits for a peer's
	// connection to come back (defaultConnectWait).
	connectWait time.Duration
	// hbWindow is the heartbeat gather window; hbUnary how long a peer
	// without the heartbeat stream gets unary heartbeats. Tests change them.
	hbWindow time.Duration
	hbUnary  time.Duration
	// checkSender, if set, vets the sender every incoming message claims
	// (SetSenderCheck); set before the server serves.
	checkSender func(ctx context.Context, id raft.ServerID) error

	// ctx is the parent of every group's context; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts background goroutines (pipeline receivers); Add only under
	// mu while not closed, so Close can Wait.
	wg sync.WaitGroup

	mu struct {
		sync.RWMutex
		closed bool
		groups map[string]*Transport
		peers  map[raft.ServerAddress]*peer
	}

	// pipelines counts pipelines opened, for tests; hbStreams heartbeat
	// streams opened, hbBatches heartbeat messages sent, hbAnswered
	// heartbeats answered on streams and hbGathers gather windows waited.
	pipelines  atomic.Int64
	hbStreams  atomic.Int64
	hbBatches  atomic.Int64
	hbAnswered atomic.Int64
	hbGathers  atomic.Int64
}

// peer is the shared connection to one peer address, and the heartbeat
// stream of all groups on it.
type peer struct {
	conn   *grpc.ClientConn
	client quoratev1.RaftTransportClient
	hb     *heartbeater
}

// awaitConn waits, at most wait, for the connection to the peer to be up
// again if it is down: see connectWait.
func (p *peer) awaitConn(ctx context.Context, wait time.Duration) {
	if p.conn.GetState() == connectivity.Ready {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		s := p.conn.GetState()
		switch s {
		case connectivity.Ready, connectivity.Shutdown:
			return
		case connectivity.Idle:
			p.conn.Connect()
		}
		if !p.conn.WaitForStateChange(ctx, s) {
			return
		}
	}
}

// NewManager returns the Manager of the node whose gRPC server is reachable
// at localAddr (the address peers dial, and raft's LocalAddr of every group).
// dialOpts configure the connections to peers; with none, connections are
// plaintext (insecure.NewCredentials). Pass grpc.WithTransportCredentials to
// use TLS. Connections are made lazily, on a group's first RPC to a peer.
//
// The connections use static flow-control windows (ServerOptions says
// why); dialOpts may override them.
func NewManager(localAddr raft.ServerAddress, dialOpts ...grpc.DialOption) *Manager {
	if len(dialOpts) == 0 {
		dialOpts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	dialOpts = append([]grpc.DialOption{
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(reconnect),
	}, dialOpts...)
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		localAddr:   localAddr,
		dialOpts:    dialOpts,
		timeout:     defaultTimeout,
		connectWait: defaultConnectWait,
		chunkSize:   defaultChunkSize,
		hbWindow:    defaultHeartbeatWindow,
		hbUnary:     defaultUnaryHeartbeats,
		ctx:         ctx,
		cancel:      cancel,
	}
	m.mu.groups = make(map[string]*Transport)
	m.mu.peers = make(map[raft.ServerAddress]*peer)
	return m
}

// ServerOptions are the options the gRPC server that carries RaftTransport
// should have, on top of its own: static flow-control windows, large enough
// for raft's biggest messages to stream without waiting for window updates.
//
// gRPC's default, a dynamic window sized by bandwidth-delay estimation,
// answers nearly every DATA frame received with a PING that the peer must
// acknowledge: for a stream of small messages such as heartbeats, two more
// frames, writes and wake-ups per message, about half of an idle node's
// writes. Peer connections from a Manager already use static windows for
// what they receive (answers); these options do the same for what the
// server receives.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveTime / 2, PermitWithoutStream: true}),
	}
}

// A connection to a peer that has received nothing for keepaliveTime is
// pinged, and closed if the ping is not answered within keepaliveTimeout:
// a TCP connection whose packets were dropped for a while (a partition, a
// paused process) can otherwise stay stalled in retransmission backoff for
// minutes after the network heals, with every group's replication to that
// peer on it. 10s is the least gRPC allows.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 3 * time.Second
)

// reconnect is how a connection to a peer is remade after it failed. A
// restarted peer must hear its leaders within a second: with gRPC's default
// backoff (up to two minutes, 1.6x from 1s) a peer down for 20s waited up to
// 10s more for the connection to be tried again, calling elections
// meanwhile and not ready. Raft backs off its own retries, so trying the
// connection every second at most costs little.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: time.Second,
}

// SetSenderCheck makes every incoming message pass check, given the server
// id its header claims as sender and the call's context (whose peer holds
// the caller's TLS identity), before raft sees it; a message that fails is
// answered PermissionDenied. Call it before the server serves.
func (m *Manager) SetSenderCheck(check func(ctx context.Context, id raft.ServerID) error) {
	m.checkSender = check
}

// Register adds the RaftTransport service to s. Call it once, before s
// serves; it carries every group, including those created later.
func (m *Manager) Register(s grpc.ServiceRegistrar) {
	quoratev1.RegisterRaftTransportServer(s, &server{m: m})
}

// Transport returns a new transport for group, to pass to raft.NewRaft. The
// group stays registered until the transport is closed, which raft does on
// Shutdown; the same group may then be registered again. Transport fails with
// ErrGroupExists if group already has an open transport, and with ErrClosed
// after Close.
func (m *Manager) Transport(group string) (raft.Transport, error) {
	if group == "" {
		return nil, ErrEmptyGroup
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, ErrClosed
	}
	if _, ok := m.mu.groups[group]; ok {
		return nil, fmt.Errorf("%w: %q", ErrGroupExists, group)
	}
	t := newTransport(m, group)
	m.mu.groups[group] = t
	return t, nil
}

// Close closes every group's transport and every peer connection, and waits
// for the Manager's goroutines to exit. Raft groups still running see their
// RPCs fail with raft.ErrTransportShutdown; shut them down first. Close does
// not stop the gRPC server the Manager is registered on: incoming messages
// get codes.Unavailable until the server stops. Close is idempotent.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.mu.closed {
		m.mu.Unlock()
		return nil
	}
	m.mu.closed = true
	groups, peers := m.mu.groups, m.mu.peers
	m.mu.groups, m.mu.peers = nil, nil
	m.mu.Unlock()

	m.cancel() // cancels every group's context, and so every RPC in flight
	for _, t := range groups {
		_ = t.Close()
	}
	var errs []error
	for addr, p := range peers {
		if err := p.conn.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftgrpc: close connection to %s: %w", addr, err))
		}
	}
	m.wg.Wait()
	return errors.Join(errs...)
}

// peer returns the connection to target, dialing it (lazily) on first use.
// All groups share it.
func (m *Manager) peer(target raft.ServerAddress) (*peer, error) {
	m.mu.RLock()
	p, ok := m.mu.peers[target]
	closed := m.mu.closed
	m.mu.RUnlock()
	if ok {
		return p, nil
	}
	if closed {
		return nil, raft.ErrTransportShutdown
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, raft.ErrTransportShutdown
	}
	if p, ok := m.mu.peers[target]; ok {
		return p, nil
	}
	// NewClient does no I/O: the connection is made on the first RPC.
	conn, err := grpc.NewClient(string(target), m.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("raftgrpc: connect to %s: %w", target, err)
	}
	client := quoratev1.NewRaftTransportClient(conn)
	p = &peer{conn: conn, client: client, hb: newHeartbeater(m, target, client)}
	m.mu.peers[target] = p
	return p, nil
}

// lookup returns the open transport of group, or the gRPC error its sender
// should get.
func (m *Manager) lookup(group string) (*Transport, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.mu.closed {
		return nil, status.Errorf(codes.Unavailable, "raftgrpc: %s is shutting down", m.localAddr)
	}
	t, ok := m.mu.groups[group]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "raftgrpc: no raft group %q on %s", group, m.localAddr)
	}
	return t, nil
}

// remove unregisters t, if it is still the transport of its group.
func (m *Manager) remove(t *Transport) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.groups[t.group] == t {
		delete(m.mu.groups, t.group)
	}
}

// goFunc runs f in a goroutine that Close waits for. It reports false, and
// does not run f, once the Manager is closed.
func (m *Manager) goFunc(f func()) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return false
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		f()
	}()
	return true
}

// peerCount reports how many peer connections are open, for tests.
func (m *Manager) peerCount() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.mu.peers)
}
