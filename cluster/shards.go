package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/quorate/quorate/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"time"

	"github.com/quorate/quorate/cluster/peer"
	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/shard"
)

// nodeShards is the decision engine's way to the shards from a node
// (decide.Shards): the node's own replicas when it leads them, its peers'
// otherwise.
type nodeShards struct{ n *Node }

var _ decide.Shards = nodeShards{}

// Routes returns the record's routing and a channel closed when it
// changes.
func (s nodeShards) Routes() (*ring.Ring, <-chan struct{}) {
	n := s.n
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.mu.ring, n.mu.ringChanged
}

// Submit applies ops on shard s at its leader, wherever that is, retrying
// while the leader is unknown, moving or unreachable, until ctx ends.
// Nothing that may have been applied is retried.
// With tracing on, a sampled check's submit is a span of its trace: the
// Raft commit at the leader, or the forward to it.
func (s nodeShards) Submit(ctx context.Context, sh int, ops []fsm.Op, atomic bool) (decide.Applied, error) {
	ctx, span := telemetry.StartSpan(ctx, "quorate.shard.Submit")
	a, err := s.n.retry(ctx, sh, ops, atomic)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("quorate.shard", sh), attribute.Int("quorate.ops", len(ops)), attribute.Int64("raft.index", int64(a.Index)))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
	return decide.Applied{Results: a.Results, Index: a.Index, Now: a.Now}, err
}

func (n *Node) retry(ctx context.Context, s int, ops []fsm.Op, atomic bool) (shard.Applied, error) {
	wait := 5 * time.Millisecond
	for {
		a, retry, err := n.attempt(ctx, s, ops, atomic)
		if !retry {
			return a, err
		}
		select {
		case <-ctx.Done():
			return shard.Applied{}, context.Cause(ctx)
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// attempt tries once. retry means nothing was applied and trying again may
// succeed.
func (n *Node) attempt(ctx context.Context, s int, ops []fsm.Op, atomic bool) (a shard.Applied, retry bool, err error) {
	leader := n.leaderOf(s)
	if leader == "" {
		if n.hosts(s) {
			return a, true, nil // an election: wait for it
		}
		// Not a replica, so Raft tells this node nothing: ask a replica,
		// which applies the batch if it leads, else names the leader.
		if leader = n.replicaFor(s); leader == "" {
			return a, true, nil
		}
	}
	if leader == n.cfg.NodeID {
		sh := n.host.Shard(s)
		if sh == nil {
			// A stale hint: this node's replica moved away since.
			n.host.Hint(s, "")
			return a, true, nil
		}
		a, err = sh.Submit(ctx, ops, atomic)
		if errors.Is(err, shard.ErrNotLeader) {
			return a, true, nil
		}
		return a, false, err
	}
	rec := n.record()
	if rec == nil {
		return a, true, nil
	}
	info, ok := rec.Node(leader)
	if !ok {
		return a, true, nil
	}
	f, err := n.peers.Get(info.Peer)
	if err != nil {
		return a, true, nil
	}
	reply, err := f.Forward(ctx, &pb.ShardBatch{Shard: uint32(s), Command: fsm.AppendCommand(nil, &fsm.Command{Ops: ops}), Atomic: atomic})
	var unreachable peer.Unreachable
	switch {
	case errors.Is(err, peer.ErrShed):
		return a, true, nil // nothing sent; the leader is still the one to ask
	case errors.As(err, &unreachable):
		n.host.Hint(s, "")
		return a, true, nil
	case err != nil:
		return a, false, err
	}
	switch reply.GetError() {
	case pb.ForwardError_FORWARD_ERROR_NONE:
	case pb.ForwardError_FORWARD_ERROR_NOT_LEADER:
		if reply.GetLeaderId() != leader {
			n.host.Hint(s, reply.GetLeaderId())
		} else {
			n.host.Hint(s, "")
		}
		return a, true, nil
	case pb.ForwardError_FORWARD_ERROR_REJECTED:
		return a, false, fmt.Errorf("%w: %s", decide.ErrRejected, reply.GetMessage())
	default:
		return a, false, errors.New(reply.GetMessage())
	}
	rs, err := fsm.DecodeResults(reply.GetResults())
	if err != nil || len(rs) != len(ops) {
		return a, false, errors.New("cluster: malformed forward reply")
	}
	return shard.Applied{Results: rs, Index: reply.GetIndex(), Now: reply.GetAppliedAtUnixNano()}, false, nil
}
