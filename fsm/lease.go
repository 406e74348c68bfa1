package fsm

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"

	"github.com/quorate/quorate/fsm/exact"
)

// lease is budget deducted from a bucket up front and held by one node.
type lease struct {
	key     uint64 // the bucket's key hash
	scope   string // the bucket's credit scope
	limit   Limit  // the bucket's limit at grant time, used to credit a return
	holder  string
	amount  int64
	expires int64
}

// grant deducts up to op.Cost from the bucket, as a Take would, and records a
// lease for what it deducted. It grants what is there rather than all or
// nothing, so a node asking for more than is left still gets the rest, but
// never more than a fair share of the capacity in one grant: capacity
// divided by the holders with live leases on the bucket, the asker
// included. A node with more demand asks again sooner; a newcomer is never
// starved by one holder's single large grant.
func (m *Machine) grant(h uint64, op *Op) Result {
	avail := m.take(h, op.Limit, 0, false)
	holders := m.holders(h, op.Holder)
	share := max(1, (op.Limit.Capacity()+holders-1)/holders)
	n := min(op.Cost, avail.Remaining, share)
	if n <= 0 {
		r := m.take(h, op.Limit, 1, false)
		r.Allowed = false
		return r
	}
	r := m.take(h, op.Limit, n, true)
	if !r.Allowed { // cannot happen: n fits by construction
		return r
	}
	exp := exact.Add(m.now, int64(op.TTL))
	switch op.Limit.Algorithm {
	case FixedWindow:
		// Window budget is only good in its window.
		exp = min(exp, m.fixed[h].end)
	case SlidingWindow:
		w := int64(op.Limit.Period)
		exp = min(exp, m.now-m.now%w+w)
	}
	id := m.nextLease
	m.nextLease++
	m.leases[id] = &lease{key: h, scope: m.scope, limit: op.Limit, holder: op.Holder, amount: n, expires: exp}
	m.byKey[h] = append(m.byKey[h], id)
	r.Lease, r.Granted, r.Expires = id, n, exp
	return r
}

// holders counts the distinct holders of live leases on bucket h, plus asker
// if it holds none, and drops dead lease IDs from the bucket's index.
func (m *Machine) holders(h uint64, asker string) int64 {
	ids := m.byKey[h]
	live := ids[:0]
	for _, id := range ids {
		if l, ok := m.leases[id]; ok && m.now < l.expires {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		delete(m.byKey, h)
	} else {
		m.byKey[h] = live
	}
	// Leases per bucket are few (one or two per node): scans are cheapest.
	n := int64(1) // the asker
	for i, id := range live {
		holder := m.leases[id].holder
		first := true
		for _, prev := range live[:i] {
			if m.leases[prev].holder == holder {
				first = false
				break
			}
		}
		if first && holder != asker {
			n++
		}
	}
	return n
}

// giveBack ends a lease and credits back min(unused, granted) to its bucket.
// An expired lease is gone: what it held is never credited, because the
// holder may have spent it right up to expiry.
func (m *Machine) giveBack(id uint64, unused int64) Result {
	l, ok := m.leases[id]
	if !ok || m.now >= l.expires {
		delete(m.leases, id)
		return Result{}
	}
	delete(m.leases, id)
	m.scope = l.scope
	before := m.take(l.key, l.limit, 0, false).Remaining
	r := m.refund(l.key, l.limit, min(unused, l.amount), 0)
	r.Granted = max(0, r.Remaining-before) // what the capacity let back in
	return r
}

type idemEntry struct {
	exp    int64
	result Result
}

// idemHash mixes the idempotency key with the bucket's, so the same
// idempotency key used on two buckets names two records.
func idemHash(bucket uint64, key string) uint64 {
	return xxhash.Sum64String(key) ^ bits.RotateLeft64(bucket*0x9e3779b97f4a7c15, 29)
}

// takeOnce is a Take that happens at most once per idempotency key within the
// dedupe window. Denials are remembered too: a retry with the same key gets
// the same answer, as with any idempotent API.
func (m *Machine) takeOnce(h uint64, op *Op) Result {
	ih := idemHash(h, op.IdempotencyKey)
	if e, ok := m.idem[ih]; ok && m.now < e.exp {
		r := e.result
		r.Replayed = true
		return r
	}
	r := m.take(h, op.Limit, op.Cost, true)
	m.idem[ih] = idemEntry{exp: exact.Add(m.now, int64(m.cfg.DedupeWindow)), result: r}
	return r
}
