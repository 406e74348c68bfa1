package lease

import (
	"context"

	"github.com/quorate/quorate/fsm"
)

// Item is one bucket a leased check spends from.
type Item struct {
	Key   string // the bucket key (name NUL key)
	Hash  uint64 // keyhash.Sum(Key), the hash the shard stores the bucket under
	Limit fsm.Limit
	Cost  int64
	Shard int // the shard that owns Key
}

// Spent is how one item was decided locally.
type Spent struct {
	Outcome Outcome
	// Left is what this node's lease (or the credit, on the key) still
	// allows on the bucket, after a Hit or Credited.
	Left int64

	e      *entry
	gen    uint64      // the entry's gen at the spend (refund)
	credit creditSpend // when Outcome is Credited
}

// Deadline is when the budget the item was decided from stops being
// spendable (local Unix ns): the lease's deadline, or the credit's.
func (sp Spent) Deadline() int64 {
	if sp.Outcome == Credited {
		return sp.credit.cr.deadline
	}
	return sp.e.deadline.Load()
}

// DenyUntil is, after a Deny, when the bucket may have refilled (local
// Unix ns): until then it is denied locally.
func (sp Spent) DenyUntil() int64 { return sp.e.denyUntil.Load() }

// Refund puts back cost spent by a Hit or Credited item whose request was
// denied as a whole; it does nothing for other outcomes.
func (sp Spent) Refund(cost int64) {
	switch sp.Outcome {
	case Hit:
		sp.e.refund(cost, sp.gen)
	case Credited:
		sp.e.refundCredit(sp.credit, cost)
	}
}

// Spend decides each item from this node's leases and credits. Items that
// find no budget join their grants, all before any waits, so the grants of
// a many-item request go out together, and are spent again once those land
// (or after AcquireWait, or when ctx ends). An item left a Miss is for the
// caller to decide strictly.
func (lt *Table) Spend(ctx context.Context, items []Item) []Spent {
	sp := make([]Spent, len(items))
	var missed []int
	for i, it := range items {
		e := lt.entryFor(it.Key, it.Hash, it.Limit, it.Shard)
		now := lt.now().UnixNano()
		out, left, gen := lt.spend(e, it.Cost, now)
		sp[i] = Spent{e: e, Outcome: out, Left: left, gen: gen}
		if out == Miss {
			if c, ok := lt.credits.spend(e, it.Cost, now); ok {
				sp[i].Outcome, sp[i].Left, sp[i].credit = Credited, c.left, c
				lt.cfg.Metrics.CreditDecision()
			}
		}
		ls := lt.shardOf(e.hash)
		if sp[i].Outcome == Miss {
			ls.misses.Add(1)
			missed = append(missed, i)
		} else {
			ls.hits.Add(1)
		}
	}
	waits := make([]*attempt, len(missed))
	for j, i := range missed {
		if waits[j] = lt.join(sp[i].e, items[i].Cost); waits[j] != nil {
			lt.signal(sp[i].e)
		}
	}
	for j, i := range missed {
		lt.acquire(ctx, sp[i].e, waits[j])
		sp[i].Outcome, sp[i].Left, sp[i].gen = lt.spend(sp[i].e, items[i].Cost, lt.now().UnixNano())
	}
	return sp
}

// SpendHit spends it from a lease this table already holds on its bucket,
// with no wait and no allocation: the fast path of a caller that checks
// the same bucket often. ok is false when that is not a plain hit (no
// entry yet, another limit, no budget, a local denial): the caller then
// takes Spend's path, which decides it fully. left is what the lease
// still allows, deadline when it stops being spendable (local Unix ns).
func (lt *Table) SpendHit(it *Item) (left, deadline int64, ok bool) {
	e := lt.lookup(it.Key, it.Hash)
	if e == nil || e.limit != it.Limit {
		return 0, 0, false
	}
	out, left, _ := lt.spend(e, it.Cost, lt.now().UnixNano())
	if out != Hit {
		return 0, 0, false
	}
	lt.shardOf(e.hash).hits.Add(1)
	return left, e.deadline.Load(), true
}
