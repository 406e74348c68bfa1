package fsm

import (
	"time"

	"github.com/quorate/quorate/fsm/exact"
)

// Credits let a node admit locally on buckets it has never leased, so the
// first leased check of a key costs no Raft commit.
//
// A credit is a lease on every bucket of the group that does not exist when
// it is granted: each such bucket is charged CreditAllowance(limit) units at
// the grant's instant, and the holder may spend up to that many units on it
// until the credit expires. The charge is virtual. A missing bucket is full,
// so all missing buckets with the same limit would be charged the same;
// instead of touching them, the machine remembers the credit's grant time,
// and whenever it brings a bucket into being (a take on a missing bucket,
// or on one that has refilled to full) it starts the bucket at
// capacity − deficit, where deficit is what the remembered charges would
// still hold against it after refilling at the limit's rate (creditDeficit).
// Buckets that exist at the grant are not charged: the grant's Result
// carries a Filter of them, and the holder never spends a credit on a key
// the filter may contain. Credits are never returned (the machine cannot
// know which keys a holder spent on), and a holder that dies strands
// nothing: the charges refill like any take.
//
// Bounds. At most CreditsPerWindow credits are granted per group in any
// CreditWindow, and one credit's charge is CreditAllowance(limit) =
// min(capacity, CreditWindow × rate) ÷ CreditsPerWindow. So the charges of
// all credits ever granted never hold more than min(capacity,
// CreditWindow × rate) against a bucket at once, whatever the limit: a
// fresh bucket starts at least that far below capacity only in the worst
// case, and typically loses one allowance or nothing. Charges older than
// twice the window are forgotten; that bound, added to the newer ones,
// keeps the deficit an upper bound (see creditDeficit).
//
// The algorithms that can be credited are the token bucket, the policing
// leaky bucket and GCRA: their state is a single level that refills at a
// known rate. Windows count per window and are leased as before.

const (
	// CreditWindow and CreditsPerWindow bound how often a group grants
	// credits; together they size each credit (CreditAllowance).
	CreditWindow     = 20 * time.Second
	CreditsPerWindow = 16
	// creditMemory is how long a credit's grant time is kept.
	creditMemory = 2 * CreditWindow
)

// Creditable reports whether a credit can be spent on buckets of a.
func (a Algorithm) Creditable() bool {
	switch a {
	case TokenBucket, LeakyPolicing, GCRA:
		return true
	}
	return false
}

// CreditAllowance is how many units one credit lets its holder admit on one
// bucket with limit l that did not exist at the grant; zero when l cannot be
// credited (or is too slow for one unit).
func CreditAllowance(l Limit) int64 {
	if !l.Algorithm.Creditable() {
		return 0
	}
	return creditSpan(l) / CreditsPerWindow
}

// creditSpan is the most all credits together may hold against a bucket.
func creditSpan(l Limit) int64 {
	return min(l.Capacity(), refilled(l, int64(CreditWindow)))
}

// refilled is how many whole units a bucket with limit l regains in dt,
// rounded down. GCRA regains one unit per interval, which is rounded up, so
// it is slower than Limit per Period.
func refilled(l Limit, dt int64) int64 {
	if l.Algorithm == GCRA {
		return dt / l.interval()
	}
	return exact.MulDiv(dt, l.Limit, int64(l.Period))
}

// grantCredit grants op.Holder a credit for op.TTL, if the window allows
// one more, with a filter of the buckets that exist now.
func (m *Machine) grantCredit(op *Op) Result {
	m.pruneCredits()
	recent := 0
	for _, at := range m.credits {
		if at > m.now-int64(CreditWindow) {
			recent++
		}
	}
	if recent >= CreditsPerWindow {
		// The oldest recent grant leaves the window first.
		first := m.credits[len(m.credits)-recent]
		return Result{RetryAfter: dur(first + int64(CreditWindow) - m.now + 1)}
	}
	m.credits = append(m.credits, m.now)
	id := m.nextLease
	m.nextLease++
	return Result{
		Allowed: true,
		Lease:   id,
		Expires: exact.Add(m.now, int64(op.TTL)),
		Filter:  m.bucketFilter(),
	}
}

// bucketFilter covers every creditable bucket that exists now. Expired
// state is left out (it reads as a missing bucket, and is charged when
// taken from), so the filter does not depend on what the sweeper did.
func (m *Machine) bucketFilter() Filter {
	var live []uint64
	live = appendLive(live, m.tokens, m.now, tbDead)
	live = appendLive(live, m.leaky, m.now, tbDead)
	live = appendLive(live, m.tats, m.now, tatDead)
	f := newFilter(len(live))
	for _, h := range live {
		f.add(h)
	}
	return f
}

func appendLive[V any](dst []uint64, t map[uint64]V, now int64, dead func(V, int64) bool) []uint64 {
	for h, v := range t {
		if !dead(v, now) {
			dst = append(dst, h)
		}
	}
	return dst
}

// pruneCredits forgets grant times older than creditMemory.
func (m *Machine) pruneCredits() {
	i := 0
	for i < len(m.credits) && m.credits[i] <= m.now-int64(creditMemory) {
		i++
	}
	if i > 0 {
		m.credits = append(m.credits[:0], m.credits[i:]...)
	}
}

// creditDeficit is how far below capacity a bucket with limit l starts when
// it comes into being now: an upper bound on what the credits' charges still
// hold against it.
//
// The charges form a queue that drains at the limit's rate: the deficit at
// now is the largest (charges in [s, now]) − rate·(now − s) over all s.
// For s within the remembered span [u, now] (u = now − creditMemory) that
// is the replay below, refilling rounded down. For s before u, split at u:
// what charges before u could still hold at u is at most creditSpan (the
// window bound), so the term is at most creditSpan + (charges since u) −
// rate·(now − u).
func (m *Machine) creditDeficit(l Limit) int64 {
	if len(m.credits) == 0 || !l.Algorithm.Creditable() {
		return 0
	}
	a := CreditAllowance(l)
	if a == 0 {
		return 0
	}
	refill := func(dt int64) int64 { return refilled(l, dt) }
	u := m.now - int64(creditMemory)
	d, t, sum := int64(0), u, int64(0)
	for _, at := range m.credits {
		if at <= u {
			continue
		}
		d = max(0, d-refill(at-t)) + a
		t = at
		sum += a
	}
	d = max(0, d-refill(m.now-t))
	d = max(d, creditSpan(l)+sum-refill(int64(creditMemory)))
	return min(l.Capacity(), d)
}
