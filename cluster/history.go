package cluster

import (
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quorate/quorate/cluster/meta"
)

// The node's side of the policy history (cluster/meta/history.go): the
// history its meta replica keeps, and rollbacks computed from it.

// maxRollbackEntry bounds a rollback's meta entry: it carries the bodies
// it puts back, and an entry must fit in one peer message
// (codec.PeerMaxMsgSize, 64 MiB) with room to spare. A variable for tests.
var maxRollbackEntry = 32 << 20

// rollbackAttempts is how often a rollback is computed again when the set
// moved on between computing and applying it.
const rollbackAttempts = 3

// PolicyHistory is the replicated policy set (all its blocks) and its
// history, as this node's meta replica holds them.
func (n *Node) PolicyHistory() (meta.PolicyState, meta.History) {
	return n.metaFSM.History()
}

// rollbackPolicies computes rollback c (c.To) against this node's replica
// and has the meta group apply it. The state machine refuses a rollback
// computed against an older version than its own (this replica was
// behind, or the set changed meanwhile): then it is computed again once
// this replica has the newer version.
func (n *Node) rollbackPolicies(ctx context.Context, c *meta.Command, dryRun bool) (meta.Result, error) {
	for attempt := 1; ; attempt++ {
		st, h := n.metaFSM.History()
		rc, err := meta.RollbackCommand(st, h, c.To)
		if err != nil {
			return meta.Result{}, err
		}
		rc.Who = c.Who
		if b, _ := json.Marshal(rc); len(b) > maxRollbackEntry {
			return meta.Result{}, meta.Errorf(meta.Invalid, "rollback to %d would put back %d policies (%d MiB), more than one meta log entry carries (%d MiB): roll back to a later version first",
				c.To, len(rc.Policies), len(b)>>20, maxRollbackEntry>>20)
		}
		res, err := n.changePolicies(ctx, rc, dryRun)
		if res.Code != meta.CodeStale || attempt == rollbackAttempts {
			return res, err
		}
		wait, cancel := context.WithTimeout(ctx, time.Second)
		n.metaFSM.WaitVersion(wait, res.Version)
		cancel()
	}
}

// observeHistory exports the history's size and what fell off it.
func (n *Node) observeHistory() {
	hist := func(f func(meta.History) float64) func() float64 {
		return func() float64 {
			_, h := n.metaFSM.History()
			return f(h)
		}
	}
	n.metrics.Registry().MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "quorate_policy_history_versions",
			Help: "Versions of the policy set the history keeps (at most 100).",
		}, hist(func(h meta.History) float64 { return float64(len(h.Entries)) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "quorate_policy_history_changes",
			Help: "Changed policies the history keeps to rebuild older versions (at most 500,000).",
		}, hist(func(h meta.History) float64 { return float64(h.Changes()) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "quorate_policy_history_dropped_total",
			Help: "Versions of the policy set that fell off the history, oldest first, past its bounds.",
		}, hist(func(h meta.History) float64 { return float64(h.Dropped) })),
	)
}
