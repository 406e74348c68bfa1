package fsm

import (
	"math/bits"

	"github.com/quorate/quorate/keyhash"

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
//
// A grant that renews op.Lease carries what the holder still holds of it
// (op.Held) into the new lease, which the holder spends until the new
// expiry. The rest of the old lease was spent by now; the bucket is
// settled at the cap it had before that part stops counting (settle).
func (m *Machine) grant(h uint64, op *Op) Result {
	prev := m.renewed(h, op)
	if prev != nil {
		// What the holder no longer holds was spent by now: it stops
		// holding the bucket back, even if nothing is granted.
		m.settle(h, op.Limit)
		prev.amount = min(op.Held, prev.amount)
	}
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
	var carried int64
	if prev != nil {
		carried = prev.amount
		delete(m.leases, op.Lease) // carried whole into the new lease
	}
	id := m.addLease(&lease{key: h, scope: m.scope, limit: op.Limit, holder: op.Holder, amount: n + carried, expires: exp})
	r.Lease, r.Granted, r.Expires = id, n+carried, exp
	return r
}

// renewed is the live lease op renews, if it names one of its holder's on
// bucket h.
func (m *Machine) renewed(h uint64, op *Op) *lease {
	if op.Lease == 0 {
		return nil
	}
	l, ok := m.leases[op.Lease]
	if !ok || l.key != h || l.holder != op.Holder || m.now >= l.expires {
		return nil
	}
	return l
}

func (m *Machine) addLease(l *lease) uint64 {
	id := m.nextLease
	m.nextLease++
	m.leases[id] = l
	ids, ok := m.byKey[l.key]
	if !ok {
		m.index.add(l.key)
	}
	m.byKey[l.key] = append(ids, id)
	return id
}

// holders counts the distinct holders of live leases on bucket h, plus asker
// if it holds none, and drops gone lease IDs from the bucket's index.
func (m *Machine) holders(h uint64, asker string) int64 {
	ids := m.byKey[h]
	kept := ids[:0]
	var live []uint64
	for _, id := range ids {
		l, ok := m.leases[id]
		if !ok || leaseDead(l, m.now) {
			continue
		}
		kept = append(kept, id)
		if m.now < l.expires {
			live = append(live, id)
		}
	}
	if len(kept) == 0 {
		drop(&m.index, m.byKey, h)
	} else {
		m.byKey[h] = kept
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

// giveBack credits back min(unused, granted) of a lease to its bucket and
// ends it, or, with held > 0, trims it to what its holder keeps; the rest
// was spent by now, and the bucket is settled first (settle). An expired
// lease is not credited, because the holder may have spent it right up to
// expiry. A Return that names its key and holder (op.Key, op.Holder)
// finds only a lease of that bucket and holder: lease IDs are per group,
// and after a split a parent and its child grant the same IDs, so a
// Return that reaches the other group must not end another's lease.
func (m *Machine) giveBack(op *Op) Result {
	id, unused, held := op.Lease, op.Cost, op.Held
	l, ok := m.leases[id]
	if !ok || m.now >= l.expires {
		return Result{}
	}
	if (op.Key != "" && l.key != keyhash.Sum(op.Key)) || (op.Holder != "" && l.holder != op.Holder) {
		return Result{}
	}
	m.scope = l.scope
	m.settle(l.key, l.limit)
	back := min(unused, l.amount)
	if keep := min(held, l.amount-back); keep > 0 {
		l.amount = keep
	} else {
		delete(m.leases, id)
	}
	before := m.take(l.key, l.limit, 0, false).Remaining
	r := m.refund(l.key, l.limit, back, 0)
	r.Granted = min(back, max(0, r.Remaining-before)) // what the capacity let back in
	return r
}

// leaseDead reports whether l no longer matters at now: it has expired and,
// for a bucket that refills, the deficit replay has drained past its units.
// Arrivals queue behind one another, so a lease's own refill time is not
// enough; but the deficit never exceeds twice the capacity (leases are cut
// from tokens under the cap, credits add at most creditSpan), so it drains
// within the refill time of that much after the lease's units arrived.
func leaseDead(l *lease, now int64) bool {
	end := l.expires
	if l.limit.Algorithm.Creditable() && l.amount > 0 {
		end = exact.Add(end, refillTime(l.limit, exact.Mul(2, l.limit.Capacity())))
	}
	return now >= end
}

// refillTime is how long a bucket with limit l takes to refill n units.
func refillTime(l Limit, n int64) int64 {
	if l.Algorithm == GCRA {
		return exact.Mul(n, l.interval())
	}
	return exact.MulDivCeil(n, int64(l.Period), l.Limit)
}

type idemEntry struct {
	exp    int64
	result Result
}

// idemHash mixes the idempotency key with the bucket's, so the same
// idempotency key used on two buckets names two records.
func idemHash(bucket uint64, key string) uint64 {
	return keyhash.Sum(key) ^ bits.RotateLeft64(bucket*0x9e3779b97f4a7c15, 29)
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
