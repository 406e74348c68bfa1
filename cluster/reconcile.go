package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	cur, shards := n.mu.rec, n.mu.shards
	n.mu.RUnlock()
	if rec == nil || cur == nil || rec.Epoch < cur.Epoch || len(shards) > rec.Shards {
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
	next := slices.Clone(shards)
	next = append(next, make([]*shard.Shard, rec.Shards-len(next))...) // split children
	var drop []*shard.Shard
	for s := range rec.Shards {
		want := rec.Wants(self, s)
		switch {
		case want && next[s] == nil:
			sh, err := n.openShard(s, n.splitBoot(rec, s))
			if err != nil {
				n.log.Warn("opening a shard group the record places here; retrying", "shard", s, "err", err)
				continue
			}
			n.log.Info("joined a shard group", "shard", s, "epoch", rec.Epoch)
			next[s] = sh
		case !want && next[s] != nil:
			drop = append(drop, next[s])
			next[s] = nil
		}
	}
	n.mu.Lock()
	n.setRoutingLocked(rec, rg, next)
	n.mu.Unlock()
	for _, sh := range drop {
		n.dropShard(sh)
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
		n.gossip.setEpoch(rec.Epoch)
		n.metrics.observeRecord(rec)
	}
}

// dropShard closes a replica the record moved away and deletes its state,
// so that a later move back starts it afresh rather than from stale logs.
func (n *Node) dropShard(sh *shard.Shard) {
	id := sh.ID()
	n.unobserve(id)
	if err := sh.Close(); err != nil {
		n.log.Warn("closing a shard group this node left", "group", id, "err", err)
	}
	if n.wal != nil {
		l := n.wal.Log(id)
		first, _ := l.FirstIndex()
		last, _ := l.LastIndex()
		if last > 0 {
			if err := l.DeleteRange(first, last); err != nil {
				n.log.Warn("deleting the log of a shard group this node left", "group", id, "err", err)
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(n.cfg.DataDir, "shards", id)); err != nil {
		n.log.Warn("deleting a shard group this node left", "group", id, "err", err)
	}
	n.log.Info("left a shard group: its replica moved to another node", "group", id)
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
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && len(n.gossip.alive()) < 2 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
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

// peerRecords returns the newest record among the alive peers' (only the
// peer advertising the highest epoch is asked when min is set), or nil.
func (n *Node) peerRecords(ctx context.Context, min uint64) *meta.Record {
	var ask []string
	var top uint64
	for _, p := range n.gossip.alive() {
		if p.info.ID == n.cfg.NodeID || p.meta.Peer == "" {
			continue
		}
		switch {
		case min == 0:
			ask = append(ask, p.meta.Peer)
		case p.meta.Epoch > max(min, top):
			top, ask = p.meta.Epoch, []string{p.meta.Peer}
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
