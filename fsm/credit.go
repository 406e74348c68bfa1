package fsm

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/quorate/quorate/fsm/exact"
)

// Credits let a node admit locally on buckets it has never leased, so the
// first leased check of a key costs no Raft commit.
//
// A credit is a lease on every bucket of its scope (below) that does not
// exist when it is granted: its holder may admit up to CreditAllowance(limit) units on
// each such bucket until the credit expires. Buckets that exist at the
// grant are excluded: the grant's Result carries a Filter of them, and the
// holder never spends a credit on a key the filter may contain. The filter
// is a copy of the machine's bucketIndex (index.go): a superset of the
// buckets that exist, kept up to date in O(1) per bucket, so a grant costs
// the same whatever the number of buckets. Credits are
// never returned (the machine cannot know which keys a holder spent on),
// and a holder that dies strands nothing.
//
// The charge is virtual. A missing bucket is full, so all missing buckets
// with the same limit would be charged alike; instead of touching them, the
// machine remembers each credit's expiry, and whenever it brings a bucket
// into being (a take on a missing bucket, or on one that has refilled to
// full) it starts the bucket at capacity − deficit (deficit). The
// deficit counts a live credit's allowance in full, because its holder may
// still spend it, and an expired credit's as spent at the last instant it
// could have been, refilling from then on at the limit's rate. So the
// bucket's takes plus what credits may admit on it never exceed what one
// token bucket of that limit allows from the key's first admission on. As
// with leases, the charge comes before the spend, so an interval that
// starts later may see up to the live credits' allowances above the rate.
//
// Bounds. A group holds at most CreditsPerWindow credits per scope that are
// live or expired less than CreditWindow ago, and one credit's allowance is at most
// min(capacity, CreditWindow × rate) ÷ CreditsPerWindow (and at most
// MaxCreditUnits). So the deficit never exceeds min(capacity,
// CreditWindow × rate), whatever the limit: arrivals of at most
// CreditsPerWindow allowances per window refill faster than they come. In
// practice a fresh bucket starts a few units below capacity: one allowance
// per live credit.
//
// Scopes. A credit covers one scope: the buckets whose key starts with the
// scope and a NUL (the cluster keys buckets "name NUL key", so a scope is a
// limit's name), or the keys without a NUL for the empty scope. Only those
// buckets are charged, so a limit that is never checked in leased mode keeps
// exact token-bucket behaviour.
//
// The algorithms that can be credited are the token bucket, the policing
// leaky bucket and GCRA: their state is a single level that refills at a
// known rate. Windows count per window and are leased as before.

const (
	// CreditWindow and CreditsPerWindow bound the credits a group holds
	// per scope; with MaxCreditUnits they size each credit
	// (CreditAllowance).
	CreditWindow     = 10 * time.Second
	CreditsPerWindow = 16
	// MaxCreditUnits caps one credit's allowance on one bucket: a credit
	// serves a key's first few checks, after which a node leases the key.
	// The cap keeps what live credits hold against fresh buckets small.
	MaxCreditUnits = 8
	// creditMemory is how long an expired credit is remembered.
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
	return min(MaxCreditUnits, creditSpan(l)/CreditsPerWindow)
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

// CreditScope is the credit scope of a bucket key: what precedes its first
// NUL, or "" if it has none.
func CreditScope(key string) string {
	if i := strings.IndexByte(key, 0); i >= 0 {
		return key[:i]
	}
	return ""
}

// grantCredit grants op.Holder a credit for op.TTL on scope op.Key, if the
// scope holds fewer than CreditsPerWindow, with a filter of the buckets
// that exist now: a copy of the machine's index, which costs the same
// whatever the number of buckets. Credits take no lease ID: nothing refers
// to one after its grant.
func (m *Machine) grantCredit(op *Op) Result {
	m.pruneCredits(op.Key)
	credits := m.credits[op.Key]
	held := 0
	for _, until := range credits {
		if until > m.now-int64(CreditWindow) {
			held++
		}
	}
	if held >= CreditsPerWindow {
		// Expiries are sorted: the earliest held one is released first.
		first := credits[len(credits)-held]
		return Result{RetryAfter: dur(first + int64(CreditWindow) - m.now + 1)}
	}
	until := exact.Add(m.now, int64(op.TTL))
	i, _ := slices.BinarySearch(credits, until)
	m.credits[op.Key] = slices.Insert(credits, i, until)
	return Result{Allowed: true, Expires: until, Filter: m.index.filter(m.indexed())}
}

// pruneCredits forgets the credits of scope expired more than creditMemory
// ago.
func (m *Machine) pruneCredits(scope string) {
	if cs := remembered(m.credits[scope], m.now); len(cs) == 0 {
		delete(m.credits, scope)
	} else {
		m.credits[scope] = cs
	}
}

// remembered is the tail of the sorted expiries cs that still count at now.
func remembered(cs []int64, now int64) []int64 {
	for len(cs) > 0 && cs[0] <= now-int64(creditMemory) {
		cs = cs[1:]
	}
	return cs
}

// arrival is budget a bucket does not see spent: the units of a lease or a
// credit on it, counted as admitted at the last instant they could be.
type arrival struct{ at, n int64 }

// clearAt is when bucket h, with limit l and in the scope of the op being
// applied, has refilled all the budget granted ahead of use on it; every
// read caps the bucket at what it would hold had it been full at that
// time (capTB). Budget granted by leases on the bucket and by credits of
// its scope may be spent at any instant of its life without the bucket
// seeing it; capping the refill keeps (tokens) + (budget holders may still
// spend) within capacity at every instant, so strict and leased admissions
// together never exceed what one token bucket allows over any interval of
// decision times (issue 13, finding 5).
//
// Each lease's or credit's units arrive when they stop being spendable (or
// now, if they still are), and queue to be refilled at the bucket's rate:
// clear = max(clear, arrival) + refill time of its units, in arrival order,
// exactly as GCRA queues a theoretical arrival time. Leases stay in the
// machine until the queue has drained past them (leaseDead), so all of
// theirs are in the replay. Credits are remembered for creditMemory
// (u = now − creditMemory); what credits before u could still hold at u is
// at most creditSpan (the window bound), so the queue starts at u with that
// much in it when the scope has credits.
//
// The cap is a time, not a count, so that it refills in the same phase as
// the bucket it caps: a cap kept in whole tokens would round differently
// and let a bucket that alternates between the two gain a unit.
// It returns math.MinInt64 when nothing is held against the bucket.
func (m *Machine) clearAt(h uint64, l Limit) int64 {
	if !l.Algorithm.Creditable() {
		return math.MinInt64
	}
	ids, credits := m.byKey[h], m.credits[m.scope]
	if len(ids) == 0 && len(credits) == 0 {
		return math.MinInt64
	}
	var buf [16]arrival
	arr := buf[:0]
	for _, id := range ids {
		if ls, ok := m.leases[id]; ok && ls.key == h && !leaseDead(ls, m.now) {
			arr = append(arr, arrival{min(ls.expires, m.now), ls.amount})
		}
	}
	clear := int64(math.MinInt64)
	if a := CreditAllowance(l); a > 0 && len(credits) > 0 {
		u := m.now - int64(creditMemory)
		clear = exact.Add(u, refillTime(l, creditSpan(l)))
		for _, until := range credits { // sorted
			if until > u {
				arr = append(arr, arrival{min(until, m.now), a})
			}
		}
	}
	slices.SortFunc(arr, func(x, y arrival) int { return cmp.Compare(x.at, y.at) })
	for _, x := range arr {
		clear = exact.Add(max(clear, x.at), refillTime(l, x.n))
	}
	return clear
}

// heldBack is how many whole units the cap of clearAt holds back at now:
// what a capped bucket lacks from capacity at the least.
func (m *Machine) heldBack(h uint64, l Limit) int64 {
	clear := m.clearAt(h, l)
	if clear <= m.now {
		return 0
	}
	if l.Algorithm == GCRA {
		return (clear - m.now + l.interval() - 1) / l.interval()
	}
	return exact.MulDivCeil(clear-m.now, l.Limit, int64(l.Period))
}
