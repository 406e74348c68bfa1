package cluster

import (
	"context"
)

// Leaving on purpose: the node asks the meta leader to mark it leaving
// (meta.OpLeave), the mover moves its replicas to the others one safe step at a
// time (handing over each group it leads first), then records it left, and
// the node stops (`quorate leave`, or SIGTERM with --leave-on-terminate).

// leaveOnTerminate leaves before a graceful stop, with --leave-on-terminate,
// while the node still runs everything: its mover, its reconciliation.
func (n *Node) leaveOnTerminate() {
	if !n.cfg.LeaveOnTerminate || n.fenced.Load() != nil {
		return
	}
	n.mu.RLock()
	joined := n.mu.rec != nil
	n.mu.RUnlock()
	if !joined {
		return
	}
	select {
	case <-n.left:
		return
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.LeaveTimeout)
	defer cancel()
	n.log.Info("--leave-on-terminate: leaving the cluster before stopping")
	if _, err := n.Leave(ctx); err != nil {
		n.log.Error("leaving before stopping", "err", err)
	}
}
