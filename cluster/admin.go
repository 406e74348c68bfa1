package cluster

import (
	"context"
	"github.com/quorate/quorate/telemetry"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

// What an operator's Admin calls ask of the node (package api serves
// them): changes to the meta group's state through its leader, and the
// node's view of the set. Errors are of package meta's kinds, never a
// wire's status.

// Now reads the node's clock (the one it stamps meta commands with).
func (n *Node) Now() time.Time { return n.clock() }

// PolicySet is the replicated policy set as this node's meta replica
// holds it, with only the blocks live now.
func (n *Node) PolicySet() meta.PolicyState {
	st := n.metaFSM.Policies()
	st.Blocks = meta.LiveBlocks(st.Blocks, n.clock())
	return st
}

// ChangePolicies has the meta group apply a policy command (apply, delete,
// block, unblock, rollback) or, for a dry run, computes it against this
// node's copy of the set. A write is validated by the meta leader against
// the set in the log, not against this node's copy, which may be a change
// behind. The answer comes once this node decides with the change too
// (within a second), so what a caller reads back from the node it wrote to
// includes its write.
func (n *Node) ChangePolicies(ctx context.Context, c *meta.Command, dryRun bool) (meta.Result, error) {
	if c.Op == meta.OpRollback {
		return n.rollbackPolicies(ctx, c, dryRun)
	}
	return n.changePolicies(ctx, c, dryRun)
}

func (n *Node) changePolicies(ctx context.Context, c *meta.Command, dryRun bool) (meta.Result, error) {
	if dryRun {
		cur := n.metaFSM.Policies()
		now := n.clock()
		next, ch, _, code, err := meta.NextPolicies(cur.Policies, meta.LiveBlocks(cur.Blocks, now), c, now)
		if err != nil {
			return meta.Result{}, meta.Result{Err: err.Error(), Code: code}.Refusal()
		}
		ext := meta.NextExtraction(cur.Extraction, c)
		ch.Extraction = !extract.Same(cur.Extraction, ext)
		return meta.Result{Version: cur.Version, Changes: ch, Diff: policy.Diff(cur.Policies, next) + policy.ExtractionDiff(cur.Extraction, ext)}, nil
	}
	ctx, span := telemetry.StartSpan(ctx, "quorate.policy.Change", attribute.String("quorate.op", string(c.Op)))
	defer span.End()
	res, err := n.proposeMeta(ctx, c)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return res, err
	}
	if err := res.Refusal(); err != nil {
		span.SetStatus(codes.Error, err.Error())
		return res, err
	}
	span.SetAttributes(attribute.Int64("quorate.policy_version", int64(res.Version)))
	wait, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n.metaFSM.WaitVersion(wait, res.Version)
	return res, nil
}

// proposeRecord applies a record command through the meta leader and
// returns the record after it; the record's refusal is a Conflict.
func (n *Node) proposeRecord(ctx context.Context, c *meta.Command) (*meta.Record, error) {
	res, err := n.proposeMeta(ctx, c)
	if err != nil {
		return nil, err
	}
	if res.Err != "" {
		return nil, meta.Errorf(meta.Conflict, "%s", res.Err)
	}
	return res.Record, nil
}

// Leave marks this node leaving and waits until the record says it left:
// the mover moves its replicas away first (quorate leave).
func (n *Node) Leave(ctx context.Context) (uint64, error) {
	n.mu.RLock()
	rec := n.mu.rec
	n.mu.RUnlock()
	if rec == nil {
		return 0, meta.Errorf(meta.Conflict, "leave: this node has not joined a cluster")
	}
	if _, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpLeave, ID: n.cfg.NodeID}); err != nil {
		return 0, err
	}
	n.log.Info("leaving the cluster: the meta leader moves this node's replicas away")
	if mg := n.metaReplica(); mg != nil && mg.IsLeader() {
		_ = mg.TransferLeadership() // the mover must run on a node that stays
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if r := n.metaFSM.Record(); r != nil {
			if st, _ := r.State(n.cfg.NodeID); st == meta.StateLeft {
				return r.Epoch, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, meta.Errorf(meta.Timeout, "leave: the replicas are still moving (quorate status shows them); the node stays until they are done")
		case <-t.C:
		}
	}
}

// RemoveNode replaces a node that is down for good, whatever the node
// count (the dead-node grace does so by itself only while the others can
// hold every shard's replicas): its replicas are rebuilt on the others.
func (n *Node) RemoveNode(ctx context.Context, who, id string) (uint64, error) {
	if m := n.gossip.Members()[id]; m != nil && m.State == memberlist.StateAlive {
		return 0, meta.Errorf(meta.Conflict, "remove: node %q is alive; stop it first (to take a live node out, use quorate leave)", id)
	}
	rec, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpReplace, ID: id, Who: who})
	if me, ok := err.(*meta.Error); ok && me.Kind == meta.Conflict {
		me.Msg = "remove: " + me.Msg
	}
	if err != nil {
		return 0, err
	}
	n.log.Warn("node removed by an operator: its replicas are rebuilt on the others", "node", id, "epoch", rec.Epoch)
	return rec.Epoch, nil
}

// SplitShards records splits an operator asked for; the meta leader's
// mover runs them. It returns the splits with their children.
func (n *Node) SplitShards(ctx context.Context, who string, shards []uint32, all bool, at uint64) ([]meta.Split, uint64, error) {
	rec := n.metaFSM.Record()
	if rec == nil {
		return nil, 0, meta.Errorf(meta.NoLeader, "split: this node has no cluster record yet")
	}
	sps, err := rec.SplitsFor(shards, all, at)
	if err != nil {
		return nil, 0, err
	}
	after, err := n.proposeRecord(ctx, &meta.Command{Op: meta.OpSplitStart, Splits: sps, Who: who})
	if err != nil {
		return nil, 0, err
	}
	n.metrics.Splits("started", len(sps), 0)
	n.log.Info("shard splits recorded", "splits", len(sps), "epoch", after.Epoch)
	return after.Splits[len(after.Splits)-len(sps):], after.Epoch, nil
}
