package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorate/quorate/cluster/meta"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/shard"
)

// The mover's side of a split (meta/split.go). Its steps run at the leaders of
// the parent and the child over Internal.Reconfigure, each idempotent and
// applied through the group's log, so a new meta leader resumes a split
// where its predecessor left it: a fence already applied is applied again
// as a no-op, the child says which chunk it expects next, and a release of
// nothing is nothing.

// errSplitGone: the record no longer holds the split; nothing to do.
var errSplitGone = errors.New("the split is no longer in the record")

// runSplits runs the recorded splits no goroutine runs yet. Splits and
// moves never share a shard (the record refuses it), so the running set is
// shared with the moves, keyed by the child.
func (m *mover) runSplits(ctx context.Context, rec *meta.Record) {
	for _, sp := range rec.Splits {
		m.mu.Lock()
		busy := m.running[sp.Child]
		// At most --max-moves splits run at once: a split waits in the
		// record, its parent unfenced, until one ends.
		full := m.splitting >= max(1, m.n.cfg.MaxMoves)
		if !busy && !full {
			m.running[sp.Child] = true
			m.splitting++
		}
		m.mu.Unlock()
		if busy || full {
			continue
		}
		go func() {
			defer func() {
				m.mu.Lock()
				delete(m.running, sp.Child)
				m.splitting--
				m.mu.Unlock()
			}()
			m.runSplit(ctx, rec, sp)
		}()
	}
}

func (m *mover) runSplit(ctx context.Context, rec *meta.Record, sp meta.Split) {
	n := m.n
	start := time.Now()
	err := m.splitShard(ctx, rec, sp)
	if errors.Is(err, errSplitGone) {
		return
	}
	if err == nil {
		_, err = n.proposeRecord(ctx, &meta.Command{Op: meta.OpSplitDone, Splits: []meta.Split{sp}})
	}
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("shard split: a step failed; retrying", "shard", sp.Parent, "child", sp.Child, "err", err)
			n.metrics.Splits("retried", 1, 0)
		}
		return
	}
	n.metrics.Splits("done", 1, time.Since(start))
	n.log.Info("shard split done", "shard", sp.Parent, "child", sp.Child, "at", fmt.Sprintf("%#016x", sp.At), "took", time.Since(start).Round(time.Millisecond))
}

// splitShard fences the parent, copies the frozen range into the child
// chunk by chunk until the child has loaded it, and releases the parent's
// copy.
func (m *mover) splitShard(ctx context.Context, rec *meta.Record, sp meta.Split) error {
	n := m.n
	keepLo, keepHi, moveHi, err := rec.SplitRange(sp)
	if err != nil {
		return err
	}
	ranges := &pb.SplitRanges{KeepLo: keepLo, KeepHi: keepHi, MoveLo: sp.At, MoveHi: moveHi}
	step := func(s int, action pb.ReconfigureAction, r *pb.SplitRanges) (*pb.SplitRanges, error) {
		if !m.splitRecorded(sp) {
			return nil, errSplitGone
		}
		resp, err := n.atLeaderReq(ctx, s, &pb.ReconfigureRequest{Group: shard.ShardGroup(s), Action: action, Split: r})
		return resp.GetSplit(), err
	}
	// The child must lead itself before the parent is fenced: the range
	// is out of service from the fence to split-done, which should be the
	// copy alone, not the child's opening and election too.
	info, err := step(sp.Child, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_INFO, nil)
	if err != nil {
		return fmt.Errorf("waiting for shard %d to elect a leader: %w", sp.Child, err)
	}
	if fresh := info.GetKeepLo() == 0 && info.GetKeepHi() == 0 && !info.GetLoading() && info.GetSeq() == 0; !fresh &&
		(info.GetKeepLo() != sp.At || info.GetKeepHi() != moveHi) {
		return fmt.Errorf("shard %d owns %#x-%#x, not the range %#x-%#x of this split", sp.Child, info.GetKeepLo(), info.GetKeepHi(), sp.At, moveHi)
	}
	if _, err := step(sp.Parent, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_FENCE, ranges); err != nil {
		return fmt.Errorf("fencing shard %d: %w", sp.Parent, err)
	}
	for {
		info, err := step(sp.Child, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_INFO, nil)
		if err != nil {
			return fmt.Errorf("asking shard %d how far it loaded: %w", sp.Child, err)
		}
		if !info.GetLoading() && info.GetSeq() > 0 && info.GetKeepLo() == sp.At && info.GetKeepHi() == moveHi {
			break // loaded
		}
		seq := info.GetSeq()
		if !info.GetLoading() {
			seq = 0
		}
		chunk, err := step(sp.Parent, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_EXPORT, &pb.SplitRanges{MoveLo: sp.At, MoveHi: moveHi, Seq: seq})
		if err != nil {
			return fmt.Errorf("reading chunk %d of shard %d: %w", seq, sp.Parent, err)
		}
		adopt := &pb.SplitRanges{KeepLo: sp.At, KeepHi: moveHi, Seq: seq, Last: chunk.GetLast(), Chunk: chunk.GetChunk()}
		if _, err := step(sp.Child, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_ADOPT, adopt); err != nil {
			return fmt.Errorf("loading chunk %d into shard %d: %w", seq, sp.Child, err)
		}
	}
	if _, err := step(sp.Parent, pb.ReconfigureAction_RECONFIGURE_ACTION_SPLIT_RELEASE, ranges); err != nil {
		return fmt.Errorf("releasing shard %d's copy: %w", sp.Parent, err)
	}
	return nil
}

// splitRecorded reports whether the meta replica's record still holds sp.
func (m *mover) splitRecorded(sp meta.Split) bool {
	cur := m.n.metaFSM.Record()
	if cur == nil {
		return false
	}
	got, ok := cur.SplitOf(sp.Child)
	return ok && got == sp
}
