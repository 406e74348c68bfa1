package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/shard"
)

// The node's side of the replicated policy set: every node holds the
// compiled snapshot its meta replica last applied (n.policies) and decides
// with it; writes go to the meta leader, from any node.

// swapPolicies installs a snapshot the meta state machine applied.
func (n *Node) swapPolicies(s *policy.Snapshot, stamped int64) {
	n.policies.Store(n.withTenants(s))
	// On one machine (or NTP-synced ones) the lag is the time from the
	// leader's proposal to this node deciding with the change.
	n.metrics.PolicySet(s.Version(), s.Len(), n.clock().Sub(time.Unix(0, stamped)), stamped > 0)
}

// Policies is the set the node decides with (never nil), and whether its
// meta replica has caught up with the meta leader since the node started
// (decide.Policies).
func (n *Node) Policies() (*policy.Snapshot, bool) {
	return n.policies.Load(), n.policiesSynced.Load()
}

var errMetaNotLeader = errors.New("cluster: not the meta leader")

// metaWriteTimeout bounds a policy write whose caller set no deadline (an
// HTTP admin call): without a meta leader it fails rather than hangs.
const metaWriteTimeout = 10 * time.Second

// proposeMeta applies c in the meta group through its leader, wherever it
// is, retrying while the leader is unknown, moving or unreachable, until
// ctx ends (or metaWriteTimeout, if ctx has no deadline). A leader's own
// answer, a refusal or an unknown outcome, is not retried.
func (n *Node) proposeMeta(ctx context.Context, c *meta.Command) (meta.Result, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, metaWriteTimeout)
		defer cancel()
	}
	wait := 20 * time.Millisecond
	for {
		res, err := n.proposeMetaOnce(ctx, c)
		if !errors.Is(err, errMetaNotLeader) {
			return res, err
		}
		select {
		case <-ctx.Done():
			return meta.Result{}, meta.Errorf(meta.NoLeader, "the meta group has no leader: policy changes need a majority of the nodes")
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func (n *Node) proposeMetaOnce(ctx context.Context, c *meta.Command) (meta.Result, error) {
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	mg := n.host.Meta()
	if mg == nil || rec == nil {
		return meta.Result{}, errMetaNotLeader
	}
	id := mg.LeaderID()
	if id == "" {
		return meta.Result{}, errMetaNotLeader
	}
	if id == n.cfg.NodeID {
		return n.applyMeta(ctx, mg, c)
	}
	info, ok := rec.Node(id)
	if !ok {
		return meta.Result{}, errMetaNotLeader
	}
	f, err := n.peers.Get(info.Peer)
	if err != nil {
		return meta.Result{}, errMetaNotLeader
	}
	b, err := json.Marshal(c)
	if err != nil {
		return meta.Result{}, err
	}
	reply, err := f.Internal.MetaApply(ctx, &pb.MetaApplyRequest{Command: b})
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return meta.Result{}, meta.Errorf(meta.Timeout, "policy change sent to the meta leader %s; its outcome is unknown: %v", id, err)
	case status.Code(err) == codes.Unavailable:
		return meta.Result{}, errMetaNotLeader // the leader is unreachable or moving: ask again
	default:
		// The leader answered: a refusal, or an outcome it could not know.
		// Trying again could apply a change twice (two blocks).
		return meta.Result{}, fromPeer(err)
	}
	if reply.GetNotLeader() {
		return meta.Result{}, errMetaNotLeader
	}
	var res meta.Result
	if err := json.Unmarshal(reply.GetResult(), &res); err != nil {
		return meta.Result{}, fmt.Errorf("cluster: malformed meta reply: %w", err)
	}
	return res, nil
}

// applyMeta proposes c on this node, the meta leader, stamping the time.
func (n *Node) applyMeta(ctx context.Context, g *shard.Group, c *meta.Command) (meta.Result, error) {
	c.Now = n.clock().UnixNano()
	b, err := json.Marshal(c)
	if err != nil {
		return meta.Result{}, err
	}
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	resp, err := g.Apply(b, timeout)
	if err != nil {
		if errors.Is(err, shard.ErrNotLeader) {
			return meta.Result{}, errMetaNotLeader
		}
		return meta.Result{}, meta.Errorf(meta.Unknown, "policy change: %v: it may or may not have been applied (quorate policy list shows the set)", err)
	}
	// Followers learn that an entry committed from the next AppendEntries,
	// which an idle group sends only every CommitTimeout (250-500ms): a
	// barrier entry right behind the change carries its commit index to
	// them at once, so every node decides with it within a round trip or
	// two rather than half a second.
	go func() { _ = g.Barrier(timeout) }()
	switch res := resp.(type) {
	case meta.Result:
		return res, nil
	case error:
		return meta.Result{}, res
	}
	return meta.Result{}, errors.New("cluster: no result from the meta group")
}

// opIndex asks the meta leader for its applied index (MetaApply), without
// proposing anything: what a restarted node must apply before it decides.
const opIndex = "index"

// metaIndex is the meta leader's answer to opIndex. Raft's applied index
// runs ahead of the state machine (raft counts an entry applied once it is
// queued for the machine), so a follower at the leader's index may not
// have swapped in the policies of its last entries yet: it waits for the
// leader's policy version too, and its tenant assignment's (Tenants; 0
// from leaders older than the assignment).
type metaIndex struct{ Index, Version, Tenants uint64 }

// syncPolicies marks the node's policies in sync once its meta replica has
// applied everything the meta leader had applied when asked. Until then a
// restarted node holds the set of its last snapshot, or none: the log
// entries after it are applied only once a leader says they committed,
// and a descriptor check decided meanwhile would ignore newer policies and
// blocks. Runs until it succeeds once; after that, changes arrive in order.
func (n *Node) syncPolicies(ctx context.Context) {
	for ctx.Err() == nil {
		if n.policiesCaughtUp(ctx) {
			n.policiesSynced.Store(true)
			n.log.Info("policies: in sync with the meta group", "version", n.policies.Load().Version())
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (n *Node) policiesCaughtUp(ctx context.Context) bool {
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	mg := n.host.Meta()
	if mg == nil || rec == nil {
		return n.waiting("this node holds no meta replica yet")
	}
	id := mg.LeaderID()
	switch {
	case id == "":
		return n.waiting("the meta group has no leader")
	case id == n.cfg.NodeID:
		// A leader has applied every committed entry once a barrier of its
		// own term has been applied.
		return mg.Barrier(2*time.Second) == nil || n.waiting("the meta leader (this node) applying its log")
	}
	info, ok := rec.Node(id)
	if !ok {
		return n.waiting("the meta leader " + id + " is not in the cluster record")
	}
	f, err := n.peers.Get(info.Peer)
	if err != nil {
		return n.waiting(fmt.Sprintf("cannot reach the meta leader %s: %v", id, err))
	}
	b, _ := json.Marshal(meta.Command{Op: opIndex})
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	reply, err := f.Internal.MetaApply(cctx, &pb.MetaApplyRequest{Command: b})
	if err != nil || reply.GetNotLeader() {
		return n.waiting(fmt.Sprintf("asking the meta leader %s for its index: %v", id, orNotLeader(err)))
	}
	var res metaIndex
	if json.Unmarshal(reply.GetResult(), &res) != nil {
		return n.waiting("the meta leader " + id + " sent a malformed index")
	}
	for mg.AppliedIndex() < res.Index || n.policies.Load().Version() < res.Version || n.metaFSM.Tenants().Version() < res.Tenants {
		n.waiting(fmt.Sprintf("policies at version %d of the leader's %d; tenant assignment at version %d of the leader's %d; meta log applied to index %d of the leader's %d",
			n.policies.Load().Version(), res.Version, n.metaFSM.Tenants().Version(), res.Tenants, mg.AppliedIndex(), res.Index))
		select {
		case <-cctx.Done():
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	return true
}

// waiting records why the policies are not in sync yet, for the node's
// "not ready" log; it returns false.
func (n *Node) waiting(why string) bool {
	n.policyWait.Store(&why)
	return false
}

func orNotLeader(err error) any {
	if err == nil {
		return "it is no longer the leader"
	}
	return err
}
