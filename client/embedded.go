package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
	"github.com/quorate/quorate/policy/tenants"
	"github.com/quorate/quorate/ring"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// Embedded is the limiter inside a gateway: it runs the decision core
// (package decide) in the gateway's process, with the cluster behind it.
// It follows the cluster's routing and policy set (Gateway.Watch: a change
// reaches it as it reaches a node), holds its own leases, and decides
// leased policies from them with no network call; strict policies, and
// lease grants and returns, go to the shards' leaders (Gateway.Submit).
//
// The guarantee is a node's: leases are deducted in the shards before
// they are spent, so however many gateways hold leases the cluster never
// admits more than a limit, and a gateway that dies strands at most its
// leases until they expire (at most the cluster's gateway lease TTL,
// 30s). When the cluster cannot be reached, each policy's fail_behavior
// and emergency cap answer, from the policy set the gateway last saw.
//
// It needs a token with the lease scope (the dev cluster writes
// data/credentials/gateway.token). Safe for concurrent use.
type Embedded struct {
	cl     *Cluster
	holder string
	engine *decide.Engine

	policies atomic.Pointer[policy.Snapshot]
	synced   atomic.Bool
	// The watch's own (one goroutine writes and reads them): the set as
	// compiled, and the tenant assignment, that policies combines.
	set     *policy.Snapshot
	tenants *tenants.Table

	mu struct {
		sync.Mutex
		ring    *ring.Ring
		changed chan struct{} // closed, and replaced, when ring changes
	}
	watchErrors atomic.Uint64
	watching    atomic.Pointer[string] // the node the watch reads now
	lastErr     atomic.Pointer[error]  // the last watch's error, for messages

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// EmbeddedConfig configures an Embedded limiter. Zero values take the
// defaults.
type EmbeddedConfig struct {
	// Holder names this gateway instance among those sharing its token
	// (default: host name and process id); the cluster keeps different
	// holders' leases apart.
	Holder string
	// Lease sizes and renews the leases (defaults as a node's; its TTL is
	// capped by the cluster at 30s). Its Holder and Clock are ignored.
	Lease lease.Config
	// CheckTimeout bounds a check that needs the cluster (default 1s).
	CheckTimeout time.Duration
	// Clock is the one clock the limiter reads (default time.Now).
	Clock func() time.Time
	// Observer receives what the decision core counts (default: nothing).
	Observer decide.Observer
	// DenyCache is how many recent strict denials the limiter remembers,
	// to deny a hot key over its limit without asking the cluster until
	// the denial's retry-after (decide.Config.DenyCache; 0: none, as a
	// node's --deny-cache 0).
	DenyCache int
}

// NewEmbedded starts an embedded limiter on c (a Cluster dialled with a
// lease-scope token) and waits, within ctx, for the cluster's routing and
// policy set. Close it before closing c.
func NewEmbedded(ctx context.Context, c *Cluster, cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = sanitizeHolder(host) + "-" + strconv.Itoa(os.Getpid())
	}
	e := &Embedded{cl: c, holder: cfg.Holder}
	e.mu.changed = make(chan struct{})
	e.ctx, e.cancel = context.WithCancel(context.Background())
	lc := cfg.Lease
	lc.Holder = cfg.Holder
	e.engine = decide.New(decide.Config{
		Shards: remoteShards{e}, Policies: embeddedPolicies{e}, Lease: &lc,
		CheckTimeout: cfg.CheckTimeout, Clock: cfg.Clock, Observer: cfg.Observer,
		DenyCache: cfg.DenyCache,
	})
	first := make(chan error, 1)
	e.wg.Go(func() { e.watch(first) })
	select {
	case err := <-first:
		if err != nil {
			e.Close()
			return nil, err
		}
	case <-ctx.Done():
		e.Close()
		if last := e.lastErr.Load(); last != nil {
			return nil, fmt.Errorf("client: no policy set from the cluster (%w); the last attempt: %w", context.Cause(ctx), *last)
		}
		return nil, fmt.Errorf("client: no policy set from the cluster: %w", context.Cause(ctx))
	}
	return e, nil
}

// Check decides req in-process: leased items from this gateway's leases,
// strict ones at their shards.
func (e *Embedded) Check(ctx context.Context, req *decide.Request) (*decide.Answer, error) {
	return e.engine.Check(ctx, req)
}

// Prepare resolves a descriptor check for repeated use: a handle on one
// subject (a tenant, an API key), as one would hold a rate.Limiter per
// subject. Its Allow decides a LEASED policy's single bucket from this
// gateway's lease in tens of nanoseconds with no allocation, and anything
// else by a full Check; it follows policy changes.
func (e *Embedded) Prepare(req *decide.Request) (*decide.Prepared, error) {
	return e.engine.Prepare(req)
}

// Watching is the address of the node whose Watch stream the limiter
// reads now ("" between streams).
func (e *Embedded) Watching() string {
	if a := e.watching.Load(); a != nil {
		return *a
	}
	return ""
}

// Policies returns the policy set the limiter decides with.
func (e *Embedded) Policies() *policy.Snapshot { return e.policies.Load() }

// Leases is the gateway's lease table (its Held budget, its hit counts).
func (e *Embedded) Leases() *lease.Table { return e.engine.Leases() }

// Close returns the leases the gateway holds, while the cluster still
// takes them, and stops following the cluster.
func (e *Embedded) Close() {
	e.engine.Close()
	e.cancel()
	e.wg.Wait()
}

// watch follows the cluster's routing and policy set, from one node at a
// time, moving to another when the stream breaks. first gets nil once the
// first state arrived, or the error that ends the watch before one did
// (credentials or content the cluster refuses).
func (e *Embedded) watch(first chan<- error) {
	var once sync.Once
	ready := func(err error) { once.Do(func() { first <- err }) }
	wait := 50 * time.Millisecond
	for e.ctx.Err() == nil {
		got, err := e.watchOnce(func() { ready(nil) })
		if err != nil {
			e.lastErr.Store(&err)
		}
		if got {
			wait = 50 * time.Millisecond
		} else if isPermanent(err) {
			ready(fmt.Errorf("client: watching the cluster: %w", err))
		}
		if e.ctx.Err() != nil {
			return
		}
		e.watchErrors.Add(1)
		select {
		case <-e.ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// watchOnce reads one Watch stream until it breaks, calling installed
// after each state; got says a state arrived.
func (e *Embedded) watchOnce(installed func()) (got bool, err error) {
	t := e.cl.topo.Load()
	m := e.cl.next(t, nil)
	if m == nil || !m.conn.acquire() {
		return false, errors.New("client: no node to watch")
	}
	defer m.conn.release()
	addr := m.conn.addr
	e.watching.Store(&addr)
	defer e.watching.Store(nil)
	// A policy set can be large: as large as the cluster lets it be.
	stream, err := m.conn.c.gw.Watch(e.ctx, &quoratev1.WatchRequest{Tenants: true, PolicyDeltas: true}, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, err
		}
		if err := e.install(resp); err != nil {
			return got, err
		}
		got = true
		installed()
	}
}

// policySet is the JSON form of the cluster's policy set (Gateway.Watch).
type policySet struct {
	Version    uint64              `json:"version"`
	Policies   []policy.Policy     `json:"policies"`
	Blocks     []policy.Block      `json:"blocks"`
	Extraction *extract.Extraction `json:"extraction"`
}

// install swaps in a state from the cluster.
func (e *Embedded) install(resp *quoratev1.WatchResponse) error {
	if err := e.installSet(resp); err != nil {
		return err
	}
	if err := e.installTenants(resp); err != nil {
		return err
	}
	src := policy.TierFromAssignment
	if resp.GetTierFromRequest() {
		src = policy.TierFromRequest
	}
	// Tiers resolve from the assignment as on the nodes: a check that
	// names only its tenant is decided by the tenant's plan here too.
	e.policies.Store(e.set.WithTenants(e.tenants, src))
	e.synced.Store(resp.GetPoliciesSynced())
	r, err := ringOf(resp)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r != nil && !sameRing(e.mu.ring, r) {
		e.mu.ring = r
		close(e.mu.changed)
		e.mu.changed = make(chan struct{})
	}
	return nil
}

// installSet compiles the answer's policy set, or patches the set held
// with its delta; nothing if it left the set out (the stream sent this
// version already) or the set is the version held.
func (e *Embedded) installSet(resp *quoratev1.WatchResponse) error {
	if len(resp.GetPolicyDeltaJson()) > 0 {
		return e.patchSet(resp)
	}
	if e.set != nil && (len(resp.GetPolicySetJson()) == 0 || e.set.Version() == resp.GetPolicyVersion()) {
		return nil // a new stream sends the set whole: at 300k, 40 MB not to decode again
	}
	var set policySet
	if err := json.Unmarshal(resp.GetPolicySetJson(), &set); err != nil {
		return fmt.Errorf("client: the cluster's policy set: %w", err)
	}
	snap, err := policy.Compile(set.Policies, set.Blocks, resp.GetPolicyVersion())
	if err != nil {
		return fmt.Errorf("client: the cluster's policy set %d: %w", resp.GetPolicyVersion(), err)
	}
	// The set's extraction, so the gateway reads requests as nodes do.
	x, err := extract.Compile(set.Extraction)
	if err != nil {
		return fmt.Errorf("client: the cluster's policy set %d: %w", resp.GetPolicyVersion(), err)
	}
	e.set = snap.WithExtractor(x)
	return nil
}

// patchSet applies a delta to the set held, compiling only what changed.
func (e *Embedded) patchSet(resp *quoratev1.WatchResponse) error {
	var d policy.Delta
	if err := json.Unmarshal(resp.GetPolicyDeltaJson(), &d); err != nil {
		return fmt.Errorf("client: the cluster's policy set %d: %w", resp.GetPolicyVersion(), err)
	}
	if e.set == nil || e.set.Version() != d.From {
		return fmt.Errorf("client: the cluster's policy set %d: a delta from version %d to a gateway that holds another", resp.GetPolicyVersion(), d.From)
	}
	next, err := e.set.Patched(d.Put, d.Removed, d.Blocks, resp.GetPolicyVersion())
	if err != nil {
		return fmt.Errorf("client: the cluster's policy set %d: %w", resp.GetPolicyVersion(), err)
	}
	x := e.set.Extractor()
	if !extract.Same(e.set.Extraction(), d.Extraction) {
		if x, err = extract.Compile(d.Extraction); err != nil {
			return fmt.Errorf("client: the cluster's policy set %d: %w", resp.GetPolicyVersion(), err)
		}
	}
	e.set = next.WithExtractor(x)
	return nil
}

// installTenants takes the answer's tenant assignment: whole, or a delta
// from the one this stream sent before (a new stream starts whole).
func (e *Embedded) installTenants(resp *quoratev1.WatchResponse) error {
	switch {
	case len(resp.GetTenantsJson()) > 0:
		t := new(tenants.Table)
		if err := json.Unmarshal(resp.GetTenantsJson(), t); err != nil {
			return fmt.Errorf("client: the cluster's tenant assignment: %w", err)
		}
		e.tenants = t
	case len(resp.GetTenantsDeltaJson()) > 0:
		var d tenants.Delta
		if err := json.Unmarshal(resp.GetTenantsDeltaJson(), &d); err != nil {
			return fmt.Errorf("client: the cluster's tenant assignment %d: %w", resp.GetTenantsVersion(), err)
		}
		t, err := e.tenants.Patched(d, resp.GetTenantsVersion())
		if err != nil {
			return fmt.Errorf("client: the cluster's tenant assignment %d: %w", resp.GetTenantsVersion(), err)
		}
		e.tenants = t
	}
	return nil
}

// ringOf is the routing a Watch answer describes (nil before the cluster
// has one).
func ringOf(resp *quoratev1.WatchResponse) (*ring.Ring, error) {
	n := int(resp.GetShardCount())
	if n == 0 {
		return nil, nil
	}
	uniform, err := ring.New(n)
	if err != nil {
		return nil, fmt.Errorf("client: the cluster's routing: %w", err)
	}
	bounds := make([]ring.Bound, len(resp.GetBounds()))
	for i, b := range resp.GetBounds() {
		bounds[i] = ring.Bound{Lo: b.GetLo(), Shard: int(b.GetShard())}
	}
	if sameBounds(uniform.Bounds(), bounds) {
		return uniform, nil
	}
	r, err := ring.NewSplit(n, bounds)
	if err != nil {
		return nil, fmt.Errorf("client: the cluster's routing: %w", err)
	}
	return r, nil
}

func sameRing(a, b *ring.Ring) bool {
	return a != nil && a.Shards() == b.Shards() && sameBounds(a.Bounds(), b.Bounds())
}

func sameBounds(a, b []ring.Bound) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// remoteShards is the decision core's way to the shards from a gateway:
// the cluster over gRPC (decide.Shards).
type remoteShards struct{ e *Embedded }

func (s remoteShards) Routes() (*ring.Ring, <-chan struct{}) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return s.e.mu.ring, s.e.mu.changed
}

// Submit applies ops at shard sh's leader. The node retries elections and
// moves within the deadline; an error means the outcome is unknown unless
// the call was never sent (the Cluster tried every node then).
func (s remoteShards) Submit(ctx context.Context, sh int, ops []fsm.Op, atomic bool) (decide.Applied, error) {
	resp, err := s.e.cl.Submit(ctx, &quoratev1.SubmitRequest{
		Holder: s.e.holder, Shard: uint32(sh), Command: fsm.AppendCommand(nil, &fsm.Command{Ops: ops}), Atomic: atomic,
	})
	if err != nil {
		if isPermanent(err) {
			return decide.Applied{}, fmt.Errorf("%w: %v", decide.ErrRejected, err)
		}
		return decide.Applied{}, err
	}
	rs, err := fsm.DecodeResults(resp.GetResults())
	if err != nil || len(rs) != len(ops) {
		return decide.Applied{}, fmt.Errorf("client: shard %d answered %d results for %d operations: %v", sh, len(rs), len(ops), err)
	}
	return decide.Applied{Results: rs, Index: resp.GetIndex(), Now: resp.GetAppliedAtUnixNano()}, nil
}

// embeddedPolicies is the set the gateway decides with (decide.Policies).
type embeddedPolicies struct{ e *Embedded }

func (p embeddedPolicies) Policies() (*policy.Snapshot, bool) {
	s := p.e.policies.Load()
	return s, s != nil && p.e.synced.Load()
}

// sanitizeHolder keeps the characters a holder name may have.
func sanitizeHolder(s string) string {
	b := make([]byte, 0, len(s))
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' {
			b = append(b, c)
		}
	}
	if len(b) == 0 {
		return "gateway"
	}
	return string(b[:min(len(b), 40)])
}

// isPermanent reports errors that trying again does not mend: the call
// was refused for its credentials or its content.
func isPermanent(err error) bool {
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied, codes.InvalidArgument, codes.Unimplemented:
		return true
	}
	return false
}
