package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/ring"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// Cluster is a client of a whole quorate cluster that knows its topology:
// the shard count, each shard's leader and the nodes' addresses, learned
// from Admin.Status. It sends each strict check straight to the node that
// leads the shard of its items, so the check costs one network hop instead
// of two, and spreads leased checks round-robin over the nodes (see
// Routing). It is safe for concurrent use; share one per process.
//
// The view is refreshed in the background (WithRefreshInterval), at once
// (at most every MinRefreshGap) when a node call fails with UNAVAILABLE,
// and when a node answers with the quoratev1.LeaderHintHeader, which says
// it had to forward the check: the hinted leader is used from the next
// check on. A stale view never gives a wrong answer, because every node
// decides every check: a check sent to a node that no longer leads its
// shard is forwarded, one hop more, as with a plain Client.
//
// A node that cannot be reached is skipped: when a call fails with an
// error that proves the request was never sent (Retryable), the check goes
// to the next node, until every node was tried. A check that may have been
// applied is never sent twice; its error is returned.
type Cluster struct {
	cfg   clusterConfig
	seeds []string

	topo   atomic.Pointer[topology]
	rr     atomic.Uint64 // round-robin position
	kick   chan struct{} // asks for a refresh; capacity 1
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	refreshMu sync.Mutex // serializes refreshes
	asked     int        // guarded by refreshMu: rotation of the nodes a refresh asks

	mu     sync.Mutex       // guards conns and closed, and orders topology swaps
	conns  map[string]*conn // by address
	closed bool

	stats struct {
		unrouted, hinted, retried, refreshes, refreshErrors, failedLocally atomic.Uint64
	}
}

// topology is an immutable routing table; a Cluster swaps in a new one.
type topology struct {
	ring    *ring.Ring // nil until learned: everything goes round-robin
	leaders []*member  // by shard; nil where unknown
	members []*member  // by id; before the first answer, the seeds (id "")
}

type member struct {
	id   string
	conn *conn
}

func (t *topology) member(id string) *member {
	for _, m := range t.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// conn is one gRPC connection to a node. A conn that leaves the topology
// is retired and closed when its last call returns.
type conn struct {
	addr string
	c    *Client
	refs atomic.Int64 // 2 per call in flight; bit 0 set once retired
}

// acquire counts a call in; false if the conn is retired.
func (n *conn) acquire() bool {
	for {
		r := n.refs.Load()
		if r&1 != 0 {
			return false
		}
		if n.refs.CompareAndSwap(r, r+2) {
			return true
		}
	}
}

func (n *conn) release() {
	if n.refs.Add(-2) == 1 {
		_ = n.c.Close()
	}
}

func (n *conn) retire() {
	if n.refs.Or(1) == 0 {
		_ = n.c.Close()
	}
}

// DialCluster returns a Cluster that learns the cluster from the nodes at
// seeds (gRPC host:port of any nodes; one is enough). It asks the seeds'
// Admin.Status before it returns, within ctx, and fails if none answers.
// Close it to stop its background refreshes and close its connections.
func DialCluster(ctx context.Context, seeds []string, opts ...ClusterOption) (*Cluster, error) {
	if len(seeds) == 0 {
		return nil, errors.New("client: DialCluster: no seed addresses")
	}
	c := &Cluster{cfg: defaultClusterConfig(), seeds: seeds, kick: make(chan struct{}, 1), conns: map[string]*conn{}}
	for _, o := range opts {
		o(&c.cfg)
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	t := &topology{}
	for _, addr := range seeds {
		n, err := c.connTo(addr)
		if err != nil {
			c.Close()
			return nil, err
		}
		t.members = append(t.members, &member{conn: n})
	}
	c.topo.Store(t)
	if err := c.Refresh(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("client: no seed of %s answered: %w", strings.Join(seeds, ", "), err)
	}
	c.wg.Go(c.refresher)
	return c, nil
}

// connTo returns the connection to addr, opening it (lazily: gRPC connects
// on the first call) if there is none. It fails only on a malformed
// address, or once the Cluster is closed.
func (c *Cluster) connTo(addr string) (*conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, status.Error(codes.Canceled, "client: cluster closed")
	}
	if n, ok := c.conns[addr]; ok {
		return n, nil
	}
	opts := append([]grpc.DialOption{
		// A node that comes back must be reachable again within a second,
		// not after gRPC's default reconnect backoff of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second,
		}, MinConnectTimeout: time.Second}),
	}, c.cfg.dialOpts...)
	cl, err := Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	n := &conn{addr: addr, c: cl}
	c.conns[addr] = n
	return n, nil
}

// Check decides req at the node the Routing picks, and at the next node if
// that one cannot be reached (see Retryable). Errors are gRPC status errors,
// as from Client.Check: the last node's error when no node could be reached.
func (c *Cluster) Check(ctx context.Context, req *quoratev1.CheckRequest) (*quoratev1.CheckResponse, error) {
	t := c.topo.Load()
	var resp *quoratev1.CheckResponse
	err := c.send(ctx, c.pick(t, req), func(n *conn) error {
		var hdr metadata.MD
		var err error
		resp, err = n.c.rl.Check(ctx, req, grpc.Header(&hdr))
		if err == nil {
			if hints := hdr.Get(quoratev1.LeaderHintHeader); len(hints) > 0 {
				c.learn(hints)
			}
		}
		return err
	})
	if err != nil && c.cfg.failLocally && Retryable(err) && len(req.GetItems()) > 0 {
		c.stats.failedLocally.Add(1)
		return failModeAnswer(req), nil
	}
	return resp, err
}

// failModeAnswer answers req's items by their fail modes, as a node does
// for a shard that cannot decide; nothing was charged.
func failModeAnswer(req *quoratev1.CheckRequest) *quoratev1.CheckResponse {
	resp := &quoratev1.CheckResponse{Decision: quoratev1.Decision_DECISION_ALLOW,
		Reason: quoratev1.Reason_REASON_FAIL_OPEN}
	for _, it := range req.GetItems() {
		r := &quoratev1.ItemResult{Decision: quoratev1.Decision_DECISION_ALLOW, Reason: quoratev1.Reason_REASON_FAIL_OPEN,
			Limit: it.GetLimit(), Algorithm: it.GetAlgorithm()}
		if it.GetFail() == quoratev1.FailMode_FAIL_MODE_CLOSED {
			r.Decision, r.Reason = quoratev1.Decision_DECISION_DENY, quoratev1.Reason_REASON_UNAVAILABLE
			resp.Decision, resp.Reason = quoratev1.Decision_DECISION_DENY, quoratev1.Reason_REASON_UNAVAILABLE
		}
		resp.Results = append(resp.Results, r)
	}
	return resp
}

// Submit applies a batch of operations at its shard's leader
// (Gateway.Submit, a token with the lease scope): straight to the leader
// the view knows, else to any node, which forwards it. Like Check, it goes
// to the next node only when the call was never sent.
func (c *Cluster) Submit(ctx context.Context, req *quoratev1.SubmitRequest) (*quoratev1.SubmitResponse, error) {
	t := c.topo.Load()
	m := c.next(t, nil)
	if s := int(req.GetShard()); s < len(t.leaders) && t.leaders[s] != nil {
		m = t.leaders[s]
	}
	var resp *quoratev1.SubmitResponse
	err := c.send(ctx, m, func(n *conn) error {
		var err error
		resp, err = n.c.gw.Submit(ctx, req)
		return err
	})
	return resp, err
}

// send makes call at m's node, then at the next node each time the call
// proves it was never sent (Retryable), until every node was tried.
func (c *Cluster) send(ctx context.Context, m *member, call func(*conn) error) error {
	var tried []*conn
	for range 2*len(c.topo.Load().members) + 2 { // each node once, and a few picks lost to refreshes
		if m == nil {
			break
		}
		if !m.conn.acquire() { // retired by a refresh since it was picked, or closed
			tried = append(tried, m.conn)
			m = c.next(c.topo.Load(), tried)
			continue
		}
		err := call(m.conn)
		m.conn.release()
		if err == nil {
			return nil
		}
		if status.Code(err) == codes.Unavailable {
			c.refreshSoon()
		}
		if !Retryable(err) || ctx.Err() != nil {
			return err
		}
		tried = append(tried, m.conn)
		if m = c.next(c.topo.Load(), tried); m == nil {
			return err
		}
		c.stats.retried.Add(1)
	}
	return status.Error(codes.Unavailable, "client: no node to send the call to")
}

// pick is the node req goes to first.
func (c *Cluster) pick(t *topology, req *quoratev1.CheckRequest) *member {
	if c.cfg.routing == RouteLeader && req.GetMode() != quoratev1.Mode_MODE_LEASED {
		if t.ring != nil {
			if s := leaderShard(t.ring, req.GetItems()); s >= 0 && t.leaders[s] != nil {
				return t.leaders[s]
			}
		}
		c.stats.unrouted.Add(1)
	}
	return t.members[(c.rr.Add(1)-1)%uint64(len(t.members))]
}

// next is a node not tried yet, or nil.
func (c *Cluster) next(t *topology, tried []*conn) *member {
	start := c.rr.Add(1) - 1
	for i := range uint64(len(t.members)) {
		m := t.members[(start+i)%uint64(len(t.members))]
		if !slicesContains(tried, m.conn) {
			return m
		}
	}
	return nil
}

func slicesContains(s []*conn, n *conn) bool {
	for _, x := range s {
		if x == n {
			return true
		}
	}
	return false
}

// learn applies the leader hints of an answer: a node had to forward some
// of the request's shards. A hint that changes the view is used at once
// (the next check of the shard goes to the hinted leader, or round-robin if
// the shard has none) and asks for a refresh, since a leader change seldom
// comes alone. Hints that agree with the view (a request spanning shards is
// forwarded in part by design) change nothing.
func (c *Cluster) learn(hints []string) {
	c.stats.hinted.Add(1)
	changed := false
	c.mu.Lock()
	t := c.topo.Load()
	var nt *topology
	for _, h := range hints {
		s, id, ok := quoratev1.ParseLeaderHint(h)
		if !ok || s >= len(t.leaders) {
			continue
		}
		cur := t.leaders[s]
		if (cur == nil && id == "") || (cur != nil && cur.id == id) {
			continue
		}
		changed = true
		m := t.member(id)
		if id != "" && m == nil {
			continue // a node this view does not know: the refresh will
		}
		if nt == nil {
			nt = &topology{ring: t.ring, leaders: append([]*member(nil), t.leaders...), members: t.members}
		}
		nt.leaders[s] = m
	}
	if nt != nil {
		c.topo.Store(nt)
	}
	c.mu.Unlock()
	if changed {
		c.refreshSoon()
	}
}

// refreshSoon asks the refresher for a refresh without waiting for it.
func (c *Cluster) refreshSoon() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// refresher refreshes the view every cfg.refresh (jittered) and when asked,
// at most once per cfg.minGap, until Close.
func (c *Cluster) refresher() {
	timer := time.NewTimer(c.jittered())
	defer timer.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-timer.C:
		case <-c.kick:
		}
		_ = c.Refresh(c.ctx)
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(c.cfg.minGap):
		}
		timer.Reset(c.jittered())
	}
}

// jittered is the wait before the next background refresh: uniform in
// [2/3, 4/3] of the interval; a day when background refreshes are off.
func (c *Cluster) jittered() time.Duration {
	if c.cfg.refresh < 0 {
		return 24 * time.Hour
	}
	return c.cfg.refresh*2/3 + rand.N(c.cfg.refresh*2/3+1)
}

// refreshFanout is how many nodes a refresh asks: each knows the leaders of
// the shards it replicates first hand (every shard, with three nodes and
// three replicas), so a few answers cover a large cluster, and the nodes
// asked rotate.
const refreshFanout = 3

// Refresh asks nodes for the cluster's status now and installs the view
// their answers give (see Topology). It asks up to three of the known
// nodes, and the seeds if none of them answers. It returns an error, and
// keeps the current view, if no node answered within ctx. Refreshes also
// run on their own; call it to force one.
func (c *Cluster) Refresh(ctx context.Context) error {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	t := c.topo.Load()
	ask := make([]*conn, 0, refreshFanout)
	for i := range min(len(t.members), refreshFanout) {
		ask = append(ask, t.members[(c.asked+i)%len(t.members)].conn)
	}
	c.asked++
	answers, err := c.askStatus(ctx, ask)
	if len(answers) == 0 {
		var seeds []*conn
		for _, addr := range c.seeds {
			n, cerr := c.connTo(addr)
			if cerr != nil {
				err = cerr
				break
			}
			if !slicesContains(ask, n) {
				seeds = append(seeds, n)
			}
		}
		if len(seeds) > 0 {
			answers, err = c.askStatus(ctx, seeds)
		}
	}
	c.stats.refreshes.Add(1)
	if len(answers) == 0 {
		c.stats.refreshErrors.Add(1)
		if err == nil {
			err = status.Error(codes.Unavailable, "client: no node to ask for the cluster's status")
		}
		return err
	}
	return c.install(mergeStatus(answers))
}

// askStatus calls Admin.Status on each conn at once and returns the
// answers, and the last error.
func (c *Cluster) askStatus(ctx context.Context, conns []*conn) ([]statusAnswer, error) {
	answers := make([]*statusAnswer, len(conns))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, n := range conns {
		if !n.acquire() {
			errs[i] = status.Error(codes.Unavailable, "client: connection retired")
			continue
		}
		wg.Go(func() {
			defer n.release()
			cctx, cancel := context.WithTimeout(ctx, c.cfg.statusTimeout)
			defer cancel()
			resp, err := n.c.Status(cctx)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", n.addr, err)
				return
			}
			answers[i] = &statusAnswer{via: n.addr, resp: resp}
		})
	}
	wg.Wait()
	var out []statusAnswer
	var err error
	for i, a := range answers {
		if a != nil {
			out = append(out, *a)
		} else if errs[i] != nil {
			err = errs[i]
		}
	}
	return out, err
}

// install binds a view to connections, swaps it in, and retires the
// connections no longer in it. A view without nodes (a node that has not
// joined a cluster yet) keeps the members it has.
func (c *Cluster) install(v view) error {
	old := c.topo.Load()
	t := &topology{}
	if v.shards > 0 {
		var err error
		if t.ring, err = ring.New(v.shards); err != nil {
			return err
		}
		if len(v.bounds) > 0 {
			if r, err := ring.NewSplit(v.shards, v.bounds); err == nil {
				t.ring = r // else the uniform ring: a wrong guess only costs a forward
			}
		}
		t.leaders = make([]*member, v.shards)
	}
	for _, id := range sortedIDs(v.nodes) {
		n, err := c.connTo(v.nodes[id])
		if err != nil {
			return err
		}
		t.members = append(t.members, &member{id: id, conn: n})
	}
	if len(t.members) == 0 {
		t.members = old.members
	}
	for s, id := range v.leaders {
		t.leaders[s] = t.member(id)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return status.Error(codes.Canceled, "client: cluster closed")
	}
	c.topo.Store(t)
	keep := map[*conn]bool{}
	for _, m := range t.members {
		keep[m.conn] = true
	}
	for addr, n := range c.conns {
		if !keep[n] {
			delete(c.conns, addr)
			n.retire()
		}
	}
	return nil
}

// Topology returns the current view.
func (c *Cluster) Topology() Topology {
	t := c.topo.Load()
	out := Topology{Nodes: map[string]string{}}
	if t.ring != nil {
		out.Shards = t.ring.Shards()
		out.Leaders = make([]string, len(t.leaders))
		for s, m := range t.leaders {
			if m != nil {
				out.Leaders[s] = m.id
			}
		}
	}
	for _, m := range t.members {
		if m.id != "" {
			out.Nodes[m.id] = m.conn.addr
		}
	}
	return out
}

// ClusterStats counts what a Cluster did since DialCluster.
type ClusterStats struct {
	// Unrouted: strict checks (with RouteLeader) sent round-robin because
	// the view knew no leader for their shard.
	Unrouted uint64
	// Hinted: answers that carried a leader hint, i.e. the node forwarded
	// some of the request's items. With single-shard requests and a
	// current view, none.
	Hinted uint64
	// Retried: checks sent again to another node after a Retryable error.
	Retried uint64
	// Refreshes and RefreshErrors: topology refreshes, and those no node
	// answered.
	Refreshes, RefreshErrors uint64
	// FailedLocally: checks answered by their items' fail modes because no
	// node could be reached (WithLocalFailModes).
	FailedLocally uint64
}

// Stats returns the counts so far.
func (c *Cluster) Stats() ClusterStats {
	return ClusterStats{
		Unrouted: c.stats.unrouted.Load(), Hinted: c.stats.hinted.Load(), Retried: c.stats.retried.Load(),
		Refreshes: c.stats.refreshes.Load(), RefreshErrors: c.stats.refreshErrors.Load(),
		FailedLocally: c.stats.failedLocally.Load(),
	}
}

// Close stops the background refreshes and closes every connection, each
// once the calls in flight on it have returned. Checks after Close fail.
func (c *Cluster) Close() error {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for addr, n := range c.conns {
		delete(c.conns, addr)
		n.retire()
	}
	return nil
}
