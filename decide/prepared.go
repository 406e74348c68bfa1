package decide

import (
	"context"
	"sync/atomic"

	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/lease"
	"github.com/quorate/quorate/policy"
)

// Prepared is a descriptor check resolved ahead of time, for a caller that
// checks the same subject often: a gateway's handle on a tenant, as it
// would hold a golang.org/x/time/rate Limiter per tenant. While the policy
// set is the one it was resolved with, and its one bucket is leased and
// the lease has budget, Allow spends from the lease with no resolution, no
// allocation and no network; otherwise it decides with a full Check. The
// fast path counts in the lease table's hits, not in the Observer.
//
// A Prepared is safe for concurrent use.
type Prepared struct {
	e    *Engine
	req  Request
	fast atomic.Pointer[fastPath] // swapped whole when the set changes
}

// fastPath is what a Prepared resolved under one policy set.
type fastPath struct {
	snap *policy.Snapshot // the set it was resolved under
	ok   bool             // the set gives a fast path: item
	item lease.Item       // the one leased bucket
}

// Prepare validates and resolves a descriptor check for repeated use.
func (e *Engine) Prepare(req *Request) (*Prepared, error) {
	if req.Descriptors == nil {
		return nil, badRequest("descriptors", "Prepare takes a descriptor check")
	}
	if err := validateRequest(req); err != nil {
		return nil, err
	}
	p := &Prepared{e: e, req: *req}
	p.fast.Store(p.resolve())
	return p, nil
}

// resolve finds the fast path under the current set: exactly one applied
// policy, hard, with one bucket the lease table decides. Anything else
// decides by Check.
func (p *Prepared) resolve() *fastPath {
	e := p.e
	if e.leases == nil || e.cfg.Policies == nil {
		return &fastPath{}
	}
	snap, synced := e.cfg.Policies.Policies()
	fp := &fastPath{snap: snap}
	routes, _ := e.shards.Routes()
	if !synced || routes == nil || p.req.DryRun || p.req.Mode == Strict {
		return fp
	}
	r, err := parseDescriptors(p.req.Descriptors, &e.cfg.Limits)
	if err != nil {
		return fp
	}
	var res policy.Resolution
	r.Memory = e.recaller(true)
	snap.DecideInto(&r, e.clock(), &res)
	if res.Block != nil || res.BlockPolicy != "" || len(res.Applied) != 1 || res.Applied[0].Mode != policy.Hard || res.Applied[0].Remembers {
		return fp
	}
	items, _, err := policyItems(res.Applied, p.req.Mode, &e.cfg.Limits)
	if err != nil || len(items) != 1 || !items[0].leased {
		return fp
	}
	op := items[0].op
	h := keyhash.Sum(op.Key)
	fp.item = lease.Item{Key: op.Key, Hash: h, Limit: op.Limit, Cost: op.Cost, Shard: routes.ShardForHash(h)}
	fp.ok = true
	return fp
}

// Allow decides the prepared check once: from the lease when the fast
// path holds, else by Check. It reports whether the request is allowed
// now: a THROTTLE is not (Check's answer carries its wait).
func (p *Prepared) Allow(ctx context.Context) (bool, error) {
	if fp := p.fast.Load(); fp.ok {
		if snap, _ := p.e.cfg.Policies.Policies(); snap == fp.snap {
			if _, _, ok := p.e.leases.SpendHit(&fp.item); ok {
				return true, nil
			}
		}
	}
	ans, err := p.Check(ctx)
	if err != nil {
		return false, err
	}
	return ans.Decision == Allow, nil
}

// Check decides the prepared check fully (Engine.Check), with its answer.
func (p *Prepared) Check(ctx context.Context) (*Answer, error) {
	req := p.req
	ans, err := p.e.Check(ctx, &req)
	if err == nil && p.e.cfg.Policies != nil {
		if snap, _ := p.e.cfg.Policies.Policies(); snap != p.fast.Load().snap {
			p.fast.Store(p.resolve()) // the set changed: find the fast path again
		}
	}
	return ans, err
}
