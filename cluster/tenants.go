package cluster

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/tenants"
	"github.com/quorate/quorate/shard"
	"github.com/quorate/quorate/telemetry"
)

// The node's side of the tenant assignment: the meta replica applies it
// beside the policy set, and the node decides with a snapshot that holds
// both (policy.Snapshot.WithTenants), swapped whole when either changes.
// Both hooks run on the meta group's apply goroutine, one at a time, so
// the two swaps never race.

// swapTenants installs an assignment the meta state machine applied.
func (n *Node) swapTenants(t *tenants.Table, stamped int64) {
	n.policies.Store(n.policies.Load().WithTenants(t, n.cfg.TenantTier))
	n.metrics.TenantSet(t.Version(), t.Len(), n.clock().Sub(time.Unix(0, stamped)), stamped > 0)
	if stamped > 0 {
		n.snapshotTenants(t)
	}
}

// tenantSnapshots has the meta replica snapshot once tenant changes pile
// up in its log: a restarted node then restores the assignment whole (a
// million: about a second) rather than replaying every chunk since raft's
// own snapshot, taken only every 8,192 entries (a chunk: about 15 ms at a
// million). Every max(64, tenants/20,000) changes: about where replaying
// would cost more than restoring, and rare for a large table.
type tenantSnapshots struct {
	since atomic.Int64 // tenant changes applied since this node's last snapshot of them
	busy  atomic.Bool  // a snapshot is being taken
}

func (n *Node) snapshotTenants(t *tenants.Table) {
	every := int64(max(64, t.Len()/20_000))
	if n.tenantSnaps.since.Add(1) < every || !n.tenantSnaps.busy.CompareAndSwap(false, true) {
		return
	}
	// Not on this goroutine: raft takes the snapshot on the one applying
	// this change.
	go func() {
		defer n.tenantSnaps.busy.Store(false)
		mg := n.host.Meta()
		if mg == nil {
			return
		}
		start := time.Now()
		switch err := mg.Snapshot(); {
		case err == nil:
			n.tenantSnaps.since.Store(0)
			n.log.Info("meta group snapshot after tenant changes", "tenants", t.Len(), "took", time.Since(start).Round(time.Millisecond))
		case !errors.Is(err, shard.ErrNothingNew):
			n.log.Warn("meta group snapshot after tenant changes", "err", err)
		}
	}()
}

// withTenants gives a policy snapshot the meta replica applied the
// current assignment.
func (n *Node) withTenants(s *policy.Snapshot) *policy.Snapshot {
	return s.WithTenants(n.metaFSM.Tenants(), n.cfg.TenantTier)
}

// Tenants is the tenant assignment as this node's meta replica holds it
// (nil: none).
func (n *Node) Tenants() *tenants.Table { return n.metaFSM.Tenants() }

// ChangeTenants has the meta group apply a tenant command (tenant-set,
// tenant-delete), checked here first so that a bad one is refused without
// a round trip. Like ChangePolicies, it answers once this node resolves
// with the change too (within a second).
func (n *Node) ChangeTenants(ctx context.Context, c *meta.Command) (meta.TenantResult, error) {
	if err := meta.CheckTenantChange(c); err != nil {
		return meta.TenantResult{}, meta.Errorf(meta.Invalid, "%v", err)
	}
	ctx, span := telemetry.StartSpan(ctx, "quorate.tenants.Change", attribute.String("quorate.op", c.Op), attribute.Int("quorate.tenants", len(c.Tenants)+len(c.IDs)))
	defer span.End()
	res, err := n.proposeMeta(ctx, c)
	if err == nil {
		err = res.Refusal()
	}
	if err == nil && res.Tenants == nil {
		err = meta.Errorf(meta.Unknown, "the meta leader answered without a tenant result (is every node's quorate new enough for tenant commands?)")
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return meta.TenantResult{}, err
	}
	wait, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	n.metaFSM.WaitTenants(wait, res.Tenants.Version)
	return *res.Tenants, nil
}
