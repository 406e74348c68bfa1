package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/tenants"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// Bounds of the Gateway service. A gateway with the lease scope can hold
// budget of any bucket; these keep one gateway from holding the node's
// forwarding capacity or leases that outlive its death by long.
const (
	// MaxGatewayInFlight bounds the Submits one token has in flight on a
	// node; more are refused with RESOURCE_EXHAUSTED and counted.
	MaxGatewayInFlight = 512
	// MaxGatewayLeaseTTL bounds a gateway's lease lifetime: what a dead
	// gateway strands is given back to the bucket within it.
	MaxGatewayLeaseTTL = 30 * time.Second
	// maxHolderLen bounds the gateway instance name in holder.
	maxHolderLen = 64
)

// gateway serves quorate.v1.Gateway: the routing and policy set, and
// operations at shard leaders, for limiters embedded in gateways.
type gateway struct {
	pb.UnimplementedGatewayServer
	node Node

	shed *prometheus.CounterVec // reason
	sent *prometheus.CounterVec // part

	mu       sync.Mutex
	inFlight map[string]int // by token name; bounded by the tokens file
}

func newGateway(node Node, reg prometheus.Registerer) *gateway {
	g := &gateway{node: node, inFlight: map[string]int{}, shed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_gateway_shed_total",
		Help: "Gateway Submits refused before reaching a shard, by reason: in_flight (the token's bound) or invalid.",
	}, []string{"reason"}), sent: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quorate_gateway_watch_bytes_total",
		Help: "Bytes of state sent to embedded gateways' Watch streams, by part: policy_set or policy_delta, tenants or tenants_delta.",
	}, []string{"part"})}
	reg.MustRegister(g.shed, g.sent)
	return g
}

// Watch sends the routing and the policy set, then again on each change;
// with req.Tenants, the tenant assignment too, as deltas once the stream
// has sent it whole.
func (g *gateway) Watch(req *pb.WatchRequest, stream pb.Gateway_WatchServer) error {
	ctx := stream.Context()
	var w watchState
	for {
		r, ringChanged := g.node.Shards().Routes()
		resp, err := w.next(g.node, r, req)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
		g.count(resp)
		wctx, cancel := context.WithCancel(ctx)
		changed := make(chan struct{}, 2)
		go func() {
			if g.node.WaitPolicies(wctx, w.policies+1) {
				changed <- struct{}{}
			}
		}()
		if req.GetTenants() {
			go func() {
				if g.node.WaitTenants(wctx, w.tenants.Version()+1) {
					changed <- struct{}{}
				}
			}()
		}
		select {
		case <-ringChanged:
		case <-changed:
		case <-g.node.Stopping():
			cancel()
			return status.Error(codes.Unavailable, "api: the node is stopping; watch another")
		case <-ctx.Done():
			cancel()
			return status.FromContextError(ctx.Err()).Err()
		}
		cancel()
	}
}

// count adds what resp carried to the bytes sent.
func (g *gateway) count(resp *pb.WatchResponse) {
	parts := [...]struct {
		name string
		b    []byte
	}{{"policy_set", resp.GetPolicySetJson()}, {"policy_delta", resp.GetPolicyDeltaJson()},
		{"tenants", resp.GetTenantsJson()}, {"tenants_delta", resp.GetTenantsDeltaJson()}}
	for _, p := range parts {
		if len(p.b) > 0 {
			g.sent.WithLabelValues(p.name).Add(float64(len(p.b)))
		}
	}
}

// watchState is what a Watch stream has sent: the policy set's version
// (and its snapshot, nil when another version was sent), and the tenant
// assignment (nil: none yet).
type watchState struct {
	sent     bool
	policies uint64
	snap     *policy.Snapshot
	tenants  *tenants.Table
}

// Bounds of a delta: past them, the whole set or table is as cheap.
const (
	maxTenantDelta = 100_000
	maxPolicyDelta = 10_000
)

// next is the response that brings the stream's gateway up to the node's
// state. A gateway that asks for tenants or deltas is not sent a policy
// set again at the version it holds.
func (w *watchState) next(node Node, r *ring.Ring, req *pb.WatchRequest) (*pb.WatchResponse, error) {
	st := node.PolicySet()
	snap, synced := node.Policies()
	resp := &pb.WatchResponse{PolicyVersion: st.Version, PoliciesSynced: synced}
	if err := w.policyPart(resp, st, snap, req); err != nil {
		return nil, err
	}
	if req.GetTenants() {
		t := node.Tenants()
		resp.TenantsVersion, resp.TierFromRequest = t.Version(), snap.TierSource() == policy.TierFromRequest
		if err := w.tenantsPart(resp, t); err != nil {
			return nil, err
		}
		w.tenants = t
	}
	w.sent = true
	if r != nil {
		resp.ShardCount = uint32(r.Shards())
		for _, b := range r.Bounds() {
			resp.Bounds = append(resp.Bounds, &pb.RingBound{Lo: b.Lo, Shard: uint32(b.Shard)})
		}
	}
	return resp, nil
}

// policyPart fills in the policy set st (whose compiled form, if at its
// version, is snap): nothing if the stream sent its version to a gateway
// that keeps it, else a delta from the snapshot the stream sent, else st
// whole.
func (w *watchState) policyPart(resp *pb.WatchResponse, st meta.PolicyState, snap *policy.Snapshot, req *pb.WatchRequest) error {
	if (req.GetTenants() || req.GetPolicyDeltas()) && w.sent && st.Version == w.policies {
		return nil
	}
	var err error
	if req.GetPolicyDeltas() && w.snap != nil && snap.Version() == st.Version {
		if put, removed, ok := snap.DeltaFrom(w.snap, maxPolicyDelta); ok {
			resp.PolicyDeltaJson, err = json.Marshal(policy.Delta{From: w.snap.Version(), Put: put, Removed: removed,
				Blocks: snap.Blocks(), Extraction: snap.Extraction()})
			w.policies, w.snap = st.Version, snap
			return err
		}
	}
	resp.PolicySetJson, err = json.Marshal(st)
	w.policies, w.snap = st.Version, nil
	if snap.Version() == st.Version {
		w.snap = snap
	}
	return err
}

// tenantsPart fills in the assignment t: nothing if the stream sent its
// version, else a delta from what it sent, else t whole.
func (w *watchState) tenantsPart(resp *pb.WatchResponse, t *tenants.Table) error {
	if w.sent && t.Version() == w.tenants.Version() {
		return nil
	}
	var err error
	if d, ok := t.DeltaFrom(w.tenants, maxTenantDelta); ok && w.sent {
		resp.TenantsDeltaJson, err = json.Marshal(d)
		return err
	}
	if t == nil {
		t = (*tenants.Table)(nil).WithVersion(0)
	}
	resp.TenantsJson, err = json.Marshal(t)
	return err
}

// Submit applies a gateway's batch at its shard's leader.
func (g *gateway) Submit(ctx context.Context, req *pb.SubmitRequest) (*pb.SubmitResponse, error) {
	who := security.PrincipalName(ctx)
	ops, err := g.gatewayOps(who, req)
	if err != nil {
		g.shed.WithLabelValues("invalid").Inc()
		return nil, err
	}
	if !g.enter(who) {
		g.shed.WithLabelValues("in_flight").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "api: token %q has %d gateway submits in flight on this node, the most it may", who, MaxGatewayInFlight)
	}
	defer g.leave(who)
	a, err := g.node.Shards().Submit(ctx, int(req.GetShard()), ops, req.GetAtomic())
	switch {
	case errors.Is(err, decide.ErrRejected):
		return nil, status.Error(codes.InvalidArgument, trimPackage(err))
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, status.FromContextError(err).Err()
	case err != nil:
		// The batch may or may not have been applied: the caller must not
		// send it again as if it had not.
		return nil, status.Error(codes.Unknown, "api: outcome unknown: "+err.Error())
	}
	return &pb.SubmitResponse{Results: fsm.AppendResults(nil, a.Results), Index: a.Index, AppliedAtUnixNano: a.Now}, nil
}

// gatewayOps decodes and checks a batch: a routed shard, no Reset, lease
// lifetimes within MaxGatewayLeaseTTL, and the holder made the token's, so
// that no gateway spends or returns another's leases.
func (g *gateway) gatewayOps(who string, req *pb.SubmitRequest) ([]fsm.Op, error) {
	h := req.GetHolder()
	if h == "" || len(h) > maxHolderLen || !holderName(h) {
		return nil, badRequest("holder", "%q: want 1 to %d of [A-Za-z0-9_.-]", h, maxHolderLen)
	}
	r, _ := g.node.Shards().Routes()
	if r == nil {
		return nil, status.Error(codes.Unavailable, "api: the node is not part of a bootstrapped cluster yet")
	}
	if s := int(req.GetShard()); s >= r.Shards() {
		return nil, badRequest("shard", "%d: the cluster has %d shards", s, r.Shards())
	}
	cmd, err := fsm.DecodeCommand(req.GetCommand())
	if err != nil {
		return nil, badRequest("command", "%v", err)
	}
	if len(cmd.Ops) == 0 || len(cmd.Ops) > decide.DefaultMaxRequestItems {
		return nil, badRequest("command", "%d operations: want 1 to %d", len(cmd.Ops), decide.DefaultMaxRequestItems)
	}
	holder := "gw:" + who + "/" + h
	for i := range cmd.Ops {
		op := &cmd.Ops[i]
		switch op.Kind {
		case fsm.OpTake, fsm.OpPeek, fsm.OpRefund:
			op.Holder = ""
		case fsm.OpGrant, fsm.OpReturn, fsm.OpCredit:
			if op.TTL > MaxGatewayLeaseTTL {
				return nil, badRequest(fmt.Sprintf("command.ops[%d].ttl", i), "%v: a gateway's leases last at most %v", op.TTL, MaxGatewayLeaseTTL)
			}
			op.Holder = holder
		default:
			return nil, badRequest(fmt.Sprintf("command.ops[%d].kind", i), "operation kind %d is not for gateways", op.Kind)
		}
	}
	return cmd.Ops, nil
}

func holderName(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func (g *gateway) enter(who string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[who] >= MaxGatewayInFlight {
		return false
	}
	g.inFlight[who]++
	return true
}

func (g *gateway) leave(who string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight[who]--; g.inFlight[who] <= 0 {
		delete(g.inFlight, who)
	}
}
