package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/shard"
)

// Every node follows the record its meta replica applies: it opens the
// shard groups the record places on it or a move adds it to (without
// bootstrapping them: the group's leader adds it), closes and deletes the
// ones it no longer belongs to, routes by the record's placement, and keeps
// a copy on disk. A node the record says was removed, or left, stops.

// errRemoved ends a node that the cluster replaced: it must not serve.
var errRemoved = errors.New("cluster: this node was removed from the cluster")

// recordChanged is the meta state machine's nudge (meta.FSM.OnRecord).
func (n *Node) recordChanged() {
	select {
	case n.recordCh <- struct{}{}:
	default:
	}
}

// followRecord reconciles with the record whenever the meta replica
// applies a change, and once a second in case an open failed.
func (n *Node) followRecord(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		n.reconcile()
		select {
		case <-ctx.Done():
			return
		case <-n.recordCh:
		case <-t.C:
		}
	}
}

func (n *Node) reconcile() {
	rec := n.metaFSM.Record()
	n.mu.RLock()
	cur := n.mu.rec
	n.mu.RUnlock()
	if rec == nil || cur == nil || rec.Epoch < cur.Epoch || len(n.host.Shards()) > rec.Shards {
		return
	}
	rg, err := rec.Ring()
	if err != nil {
		n.log.Error("the cluster record's ranges do not route", "epoch", rec.Epoch, "err", err)
		return
	}
	self := n.cfg.NodeID
	switch st, ok := rec.State(self); {
	case !ok || st == meta.StateRemoved:
		n.fence(rec)
		return
	case st == meta.StateLeft:
		n.leftOnce.Do(func() {
			n.log.Info("left the cluster: no replica is placed on this node any more", "epoch", rec.Epoch)
			close(n.left)
		})
		return
	}
	var drop []int
	for s := range rec.Shards { // split children too
		want, held := rec.Wants(self, s), n.host.Shard(s) != nil
		switch {
		case want && !held:
			if _, err := n.host.OpenShard(s, n.splitBoot(rec, s)); err != nil {
				n.log.Warn("opening a shard group the record places here; retrying", "shard", s, "err", err)
				continue
			}
			n.log.Info("joined a shard group", "shard", s, "epoch", rec.Epoch)
		case !want && held:
			drop = append(drop, s)
		}
	}
	n.mu.Lock()
	n.setRoutingLocked(rec, rg)
	n.mu.Unlock()
	for _, s := range drop {
		// Its state goes too, so that a later move back starts afresh
		// rather than from a stale log.
		n.host.DropShard(s)
		n.metrics.Forget(shard.ShardGroup(s))
		n.log.Info("left a shard group: its replica moved to another node", "shard", s)
	}
	if rec.Epoch != n.savedEpoch {
		// Retried each second until it works: a restart reopens the groups
		// the disk copy names.
		if err := saveRecord(n.cfg.DataDir, rec); err != nil {
			n.log.Warn("saving the cluster record", "err", err)
		} else {
			n.savedEpoch = rec.Epoch
		}
	}
	if rec.Epoch != cur.Epoch {
		n.gossip.SetEpoch(rec.Epoch)
		n.observeRecord(rec)
	}
}

// fence stops a node the cluster removed: its groups already replaced it,
// so it serves none of them (Raft refuses its votes; closing them stops it
// from trying), and the process ends with the reason.
func (n *Node) fence(rec *meta.Record) {
	n.fenceOnce.Do(func() {
		n.fenced.Store(fmt.Errorf("%w at epoch %d (it was dead longer than the dead-node grace, "+
			"and its replicas were rebuilt on the other nodes); it serves none of its old groups. "+
			"To bring this machine back, empty its --data directory and start it again: it joins as a new node",
			errRemoved, rec.Epoch))
		n.log.Error("this node was removed from the cluster: stopping", "epoch", rec.Epoch)
		n.exit()
	})
}

// stillMember asks the peers gossip knows for their record before a
// restarted node opens its groups: one that was replaced while it was down
// learns so here, before it opens anything.
func (n *Node) stillMember(ctx context.Context, rec *meta.Record) error {
	if len(rec.Nodes) < 2 {
		return nil // a cluster of one: nobody to ask, nobody to replace it
	}
	n.awaitPeers(ctx, 3*time.Second)
	newest := n.peerRecords(ctx, 0)
	if newest == nil || newest.Epoch <= rec.Epoch {
		return nil
	}
	if st, ok := newest.State(n.cfg.NodeID); !ok || st == meta.StateRemoved || st == meta.StateLeft {
		n.fence(newest)
		return n.fenced.Load().(error)
	}
	return nil
}

// awaitPeers waits, at most d, until gossip shows this node a peer.
func (n *Node) awaitPeers(ctx context.Context, d time.Duration) {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		changed := n.gossip.Changes() // before looking: no change is missed
		if len(n.gossip.Alive()) >= 2 {
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// peerRecords returns the newest record among the alive peers' (only the
// peer advertising the highest epoch is asked when min is set), or nil.
func (n *Node) peerRecords(ctx context.Context, min uint64) *meta.Record {
	var ask []string
	var top uint64
	for _, p := range n.gossip.Alive() {
		if p.Info.ID == n.cfg.NodeID || p.Meta.Peer == "" {
			continue
		}
		switch {
		case min == 0:
			ask = append(ask, p.Meta.Peer)
		case p.Meta.Epoch > max(min, top):
			top, ask = p.Meta.Epoch, []string{p.Meta.Peer}
		}
	}
	var newest *meta.Record
	for _, addr := range ask {
		r := n.askRecord(ctx, addr)
		if r != nil && (newest == nil || r.Epoch > newest.Epoch) {
			newest = r
		}
	}
	return newest
}

// watchEpochs compares this node's record with the epochs its peers
// advertise: a node the meta group no longer replicates to (it was removed
// while partitioned away) learns of its removal only this way.
func (n *Node) watchEpochs(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.mu.RLock()
		cur := n.mu.rec
		n.mu.RUnlock()
		if cur == nil {
			continue
		}
		if newest := n.peerRecords(ctx, cur.Epoch); newest != nil && newest.Epoch > cur.Epoch {
			if st, ok := newest.State(n.cfg.NodeID); !ok || st == meta.StateRemoved {
				n.fence(newest)
				return
			}
		}
	}
}
