package fsm

import (
	"math"
	"math/bits"
	"time"

	"github.com/quorate/quorate/fsm/exact"
)

// This file holds the bucket algorithms: for each, a pure view of the state
// at the machine's time, and the take and refund built on it. A view never
// writes; only a committed take or refund stores state, and state that is
// equivalent to no bucket at all (full again, window over) is deleted at once.

// tbState is a token bucket, and also a policing leaky bucket (whose free
// space behaves exactly like tokens). Refill is exact rational arithmetic:
// the bucket holds base + floor((now-anchor)·Limit/Period) tokens, and the
// anchor only ever moves by whole periods (adding exactly Limit to base), so
// no fraction of a token is ever rounded away and refill never drifts, however
// often or oddly the bucket is touched.
//
// The state packs into 16 bytes (BenchmarkMemoryPerBucket): base needs 42
// bits because capacities and rates are at most 2^40, which leaves 22 bits for
// when the bucket is full again, stored as an offset from anchor in a
// rounded-up floating-point form. Rounding it up is harmless: between the
// exact and the rounded time, the stored bucket computes as full anyway.
type tbState struct {
	anchor int64  // start of the refill period in progress
	packed uint64 // base<<22 | encoded(full-anchor)
}

const fullBits = 22

func newTB(base, anchor, full int64) tbState {
	return tbState{anchor: anchor, packed: uint64(base)<<fullBits | encodeDelta(full-anchor)}
}

// base is the tokens at anchor; it may be negative.
func (s tbState) base() int64 { return int64(s.packed) >> fullBits }

// full is when the bucket is full again: from then on it is absent.
func (s tbState) full() int64 {
	return exact.Add(s.anchor, decodeDelta(s.packed&(1<<fullBits-1)))
}

// encodeDelta rounds d >= 0 up to a 16-bit mantissa and 6-bit exponent:
// within 1/32768 of d.
func encodeDelta(d int64) uint64 {
	if d <= 0 {
		return 0
	}
	e := max(0, bits.Len64(uint64(d))-16)
	m := (uint64(d) + 1<<e - 1) >> e
	if m >= 1<<16 {
		m >>= 1
		e++
	}
	return uint64(e)<<16 | m
}

func decodeDelta(c uint64) int64 {
	e, m := c>>16, c&(1<<16-1)
	if e > 46 {
		return math.MaxInt64
	}
	return int64(m << e)
}

// tbAt returns the bucket as of now under l, with the anchor moved to the
// period in progress. A missing bucket, or one whose full time has passed,
// is full, and reported fresh: taking from it brings it into being.
func tbAt(s tbState, ok bool, now int64, l Limit) (_ tbState, fresh bool) {
	c, p := l.Capacity(), int64(l.Period)
	if !ok || now >= s.full() {
		return newTB(c, now, now), true
	}
	if k := (now - s.anchor) / p; k > 0 {
		base := exact.Add(s.base(), exact.Mul(k, l.Limit))
		if base >= c {
			return newTB(c, now, now), true
		}
		s = newTB(base, s.anchor+k*p, s.full())
	}
	if s.tokens(now, l) >= c {
		return newTB(c, now, now), true
	}
	return s, false
}

// tokens is the whole tokens in s at now (now - anchor < Period).
func (s tbState) tokens(now int64, l Limit) int64 {
	return s.base() + exact.MulDiv(now-s.anchor, l.Limit, int64(l.Period))
}

// at is when s holds n tokens.
func (s tbState) at(n int64, l Limit) int64 {
	if n <= s.base() {
		return s.anchor
	}
	return exact.Add(s.anchor, exact.MulDivCeil(n-s.base(), int64(l.Period), l.Limit))
}

// withFull stores full, the time s is full again under the limit in force,
// but never earlier than the stored state said: under a different limit (a
// policy change, or a lease returned under the limit it was granted with)
// the bucket may refill more slowly, and an early "full" would read as a
// fresh bucket.
func (s tbState) withFull(old tbState, ok bool, full int64) tbState {
	if ok && old.full() > full {
		full = old.full()
	}
	return newTB(s.base(), s.anchor, full)
}

func (m *Machine) takeTB(t map[uint64]tbState, h uint64, l Limit, cost int64, commit bool) Result {
	old, ok := t[h]
	s, _ := tbAt(old, ok, m.now, l)
	s = m.capTB(s, h, l)
	tokens := s.tokens(m.now, l)
	r := Result{Limit: l.Capacity()}
	if tokens >= cost {
		r.Allowed = true
		if commit && cost > 0 {
			s = newTB(s.base()-cost, s.anchor, 0)
			tokens -= cost
			full := s.at(l.Capacity(), l)
			r.ResetAfter = dur(full - m.now)
			if !ok {
				m.index.add(h)
			}
			t[h] = s.withFull(old, ok, full)
			r.Remaining = tokens
			return r
		}
	} else {
		r.RetryAfter = dur(s.at(cost, l) - m.now)
	}
	r.Remaining = tokens
	r.ResetAfter = dur(s.at(l.Capacity(), l) - m.now)
	return r
}

// capTB caps s so that it is full no earlier than clearAt (see there):
// budget granted ahead of use holds its place in the bucket until it has
// refilled. A missing bucket is full and so capped too: that is how credits
// charge buckets that come into being. A bucket full at time F holds
// C − (F − t)·L/P at t, so the cap is F ≥ clear, compared exactly; the
// capped state is anchored at most a unit's refill time before now, with
// its full time rounded up to a whole nanosecond.
func (m *Machine) capTB(s tbState, h uint64, l Limit) tbState {
	clear := m.clearAt(h, l)
	if clear <= m.now || !s.fullBefore(clear, l) {
		return s
	}
	c, p := l.Capacity(), int64(l.Period)
	k := exact.MulDivCeil(clear-m.now, l.Limit, p) // whole units short of full at now
	return newTB(c-k, clear-exact.MulDiv(k, p, l.Limit), 0)
}

// fullBefore reports whether s (not yet full) is full before t: whether
// anchor + (C − base)·P/L < t, exactly.
func (s tbState) fullBefore(t int64, l Limit) bool {
	if t <= s.anchor {
		return false
	}
	return !exact.MulLE(t-s.anchor, l.Limit, l.Capacity()-s.base(), int64(l.Period))
}

// settle stores bucket h as it reads now, capped (capTB, or GCRA's later
// tat), before an op lowers the budget held against it. Lowering the cap
// then lets the bucket refill from where it stands, at its rate, rather
// than jump to the new cap at once: units a holder spent up to now stay
// admitted at the instant they may have been.
func (m *Machine) settle(h uint64, l Limit) {
	switch l.Algorithm {
	case TokenBucket, LeakyPolicing:
		t := m.tokens
		if l.Algorithm == LeakyPolicing {
			t = m.leaky
		}
		old, ok := t[h]
		s, _ := tbAt(old, ok, m.now, l)
		if c := m.capTB(s, h, l); c != s {
			put(&m.index, t, h, c.withFull(old, ok, c.at(l.Capacity(), l)))
		}
	case GCRA:
		tat, ok := m.tats[h]
		if !ok || tat <= m.now {
			tat = m.now
		}
		if tat = max(tat, m.clearAt(h, l)); tat > m.now {
			put(&m.index, m.tats, h, tat)
		}
	}
}

// fullBy reports whether s is full by t: anchor + (C − base)·P/L <= t.
func (s tbState) fullBy(t int64, l Limit) bool {
	return t >= s.anchor && exact.MulLE(l.Capacity()-s.base(), int64(l.Period), t-s.anchor, l.Limit)
}

func (m *Machine) refundTB(t map[uint64]tbState, h uint64, l Limit, n int64) {
	old, ok := t[h]
	if !ok || m.now >= old.full() {
		// Absent means full (at most capped: capTB). State that is full
		// again reads as absent whether or not the sweeper has deleted it
		// yet, and must refund alike, or replicas diverge.
		return
	}
	s, _ := tbAt(old, ok, m.now, l)
	s = m.capTB(s, h, l)
	top := l.Capacity() - m.heldBack(h, l)
	s = newTB(s.base()+max(0, min(n, top-s.tokens(m.now, l))), s.anchor, 0)
	// Back to where a fresh bucket would start (full, or full as of
	// clearAt): absent again. Otherwise a bucket that a refund undid
	// entirely would keep a deficit and refill it before anything was
	// admitted.
	if s.fullBy(max(m.now, m.clearAt(h, l)), l) {
		drop(&m.index, t, h)
		return
	}
	t[h] = s.withFull(old, ok, s.at(l.Capacity(), l))
}

// takeTAT implements GCRA and the shaping leaky bucket, which share one
// state: the theoretical arrival time (tat) of the next unit. A request of
// cost n fits while tat + n·T - now <= burst·T. GCRA admits it now; the
// shaper admits it after Delay = tat - now, so that admitted units leave
// evenly spaced T apart.
func (m *Machine) takeTAT(t map[uint64]int64, h uint64, l Limit, cost int64, commit, shape bool) Result {
	T := l.interval()
	tau := exact.Mul(T, l.Capacity())
	tat, ok := t[h]
	if !ok || tat <= m.now { // a full bucket: taking brings it into being
		tat = m.now
	}
	if !shape {
		// The cap of capTB, which for GCRA is simply a later tat.
		tat = max(tat, m.clearAt(h, l))
	}
	next := exact.Add(tat, exact.Mul(T, cost))
	r := Result{Limit: l.Capacity()}
	if next-m.now <= tau {
		r.Allowed = true
		if shape {
			r.Delay = dur(tat - m.now)
		}
		if commit && cost > 0 {
			tat = next
			if !ok && !shape { // the shaper's queues are never credited
				m.index.add(h)
			}
			t[h] = tat
		}
	} else {
		r.RetryAfter = dur(next - tau - m.now)
	}
	r.Remaining = max(0, (tau-(tat-m.now))/T)
	r.ResetAfter = dur(tat - m.now)
	return r
}

// refundTAT gives n units back to t[h]; x is the index that follows t, or
// nil.
func (m *Machine) refundTAT(t map[uint64]int64, x *bucketIndex, h uint64, l Limit, n int64) {
	tat, ok := t[h]
	if !ok {
		return
	}
	T := l.interval()
	tat -= exact.Mul(T, n)
	// As for token buckets: back to where a fresh bucket would start.
	if tat <= max(m.now, m.clearAt(h, l)) {
		drop(x, t, h)
		return
	}
	t[h] = tat
}

// fwState is a fixed window's count. Windows are aligned to the Unix epoch so
// every node agrees on where they start.
type fwState struct {
	end   int64 // when the window closes; from then on the state is absent
	count int64
}

func (m *Machine) fixedAt(h uint64, l Limit) fwState {
	w := int64(l.Period)
	end := m.now - m.now%w + w
	s, ok := m.fixed[h]
	if !ok || m.now >= s.end {
		return fwState{end: end}
	}
	// A window of another length (the limit changed): its count carries
	// into the current window, so a change never grants a fresh budget.
	s.end = end
	return s
}

func (m *Machine) takeFixed(h uint64, l Limit, cost int64, commit bool) Result {
	s := m.fixedAt(h, l)
	r := Result{Limit: l.Limit}
	if s.count+cost <= l.Limit {
		r.Allowed = true
		if commit && cost > 0 {
			s.count += cost
			m.fixed[h] = s
		}
	} else {
		r.RetryAfter = dur(s.end - m.now)
	}
	r.Remaining = max(0, l.Limit-s.count)
	if s.count > 0 {
		r.ResetAfter = dur(s.end - m.now)
	}
	return r
}

func (m *Machine) refundFixed(h uint64, l Limit, n, at int64) {
	s, ok := m.fixed[h]
	if !ok || m.now >= s.end || at < s.end-int64(l.Period) {
		return // the window that counted the take has closed
	}
	if s.count -= n; s.count <= 0 {
		delete(m.fixed, h)
		return
	}
	m.fixed[h] = s
}

// swState is a sliding-window counter: the counts of the current and the
// previous epoch-aligned window.
type swState struct {
	start     int64 // start of the window cur counts
	cur, prev int64
	exp       int64 // when both counts have slid out; from then on absent
}

// slidingAt returns the counts as of now in now's window. Changing a
// window's length starts afresh.
func (m *Machine) slidingAt(h uint64, l Limit) swState {
	w := int64(l.Period)
	start := m.now - m.now%w
	s, ok := m.sliding[h]
	switch {
	case !ok || m.now >= s.exp:
		return swState{start: start}
	case s.start == start:
		return s
	case s.start+w == start:
		return swState{start: start, prev: s.cur}
	}
	return swState{start: start}
}

// fits reports whether cur + n + prev·(w-elapsed)/w <= limit, exactly.
func (s swState) fits(now int64, l Limit, n int64) bool {
	room := l.Limit - s.cur - n
	if room < 0 {
		return false
	}
	w := int64(l.Period)
	return exact.MulLE(s.prev, w-(now-s.start), room, w)
}

func (m *Machine) takeSliding(h uint64, l Limit, cost int64, commit bool) Result {
	s := m.slidingAt(h, l)
	w := int64(l.Period)
	r := Result{Limit: l.Limit}
	if s.fits(m.now, l, cost) {
		r.Allowed = true
		if commit && cost > 0 {
			s.cur += cost
			s.exp = s.start + 2*w
			m.sliding[h] = s
		}
	} else {
		r.RetryAfter = dur(s.retryAt(l, cost) - m.now)
	}
	weighted := exact.MulDivCeil(s.prev, w-(m.now-s.start), w)
	r.Remaining = max(0, l.Limit-s.cur-weighted)
	switch {
	case s.cur > 0:
		r.ResetAfter = dur(s.start + 2*w - m.now)
	case s.prev > 0:
		r.ResetAfter = dur(s.start + w - m.now)
	}
	return r
}

// retryAt is the earliest time a request of cost n fits, given no other
// traffic: later in this window as the previous count's weight decays, or
// in the next window as this window's count starts to decay.
func (s swState) retryAt(l Limit, n int64) int64 {
	w := int64(l.Period)
	if room := l.Limit - s.cur - n; room >= 0 && s.prev > 0 {
		return s.start + w - exact.MulDiv(room, w, s.prev)
	}
	if s.cur == 0 {
		return s.start + w
	}
	return s.start + 2*w - exact.MulDiv(l.Limit-n, w, s.cur)
}

func (m *Machine) refundSliding(h uint64, l Limit, n, at int64) {
	w := int64(l.Period)
	s, ok := m.sliding[h]
	if !ok || m.now >= s.exp || s.start != m.now-m.now%w {
		return
	}
	// Give back to the window that counted the take: this one, or the
	// previous one, whose count still weighs; an older take is gone.
	switch at - at%w {
	case s.start:
		s.cur = max(0, s.cur-n)
	case s.start - w:
		s.prev = max(0, s.prev-n)
	default:
		return
	}
	if s.cur == 0 && s.prev == 0 {
		delete(m.sliding, h)
		return
	}
	m.sliding[h] = s
}

// take dispatches a Take (commit) or Peek (no commit) to its algorithm.
func (m *Machine) take(h uint64, l Limit, cost int64, commit bool) Result {
	switch l.Algorithm {
	case TokenBucket:
		return m.takeTB(m.tokens, h, l, cost, commit)
	case LeakyPolicing:
		return m.takeTB(m.leaky, h, l, cost, commit)
	case GCRA:
		return m.takeTAT(m.tats, h, l, cost, commit, false)
	case LeakyShaping:
		return m.takeTAT(m.queues, h, l, cost, commit, true)
	case FixedWindow:
		return m.takeFixed(h, l, cost, commit)
	case SlidingWindow:
		return m.takeSliding(h, l, cost, commit)
	case SlidingLog:
		return m.takeLog(h, l, cost, commit)
	}
	return Result{Err: ErrUnknownAlgorithm}
}

// refund gives back n units taken at machine time at (0: now), never above
// the bucket's capacity, and reports the bucket afterwards.
func (m *Machine) refund(h uint64, l Limit, n, at int64) Result {
	m.credit(h, l, n, at)
	r := m.take(h, l, 0, false)
	r.Allowed, r.RetryAfter, r.Delay = true, 0, 0
	return r
}

func (m *Machine) credit(h uint64, l Limit, n, at int64) {
	if at > m.now {
		at = m.now
	}
	when := at // for windows: the time whose window counted the take
	if when <= 0 {
		when = m.now
	}
	switch l.Algorithm {
	case TokenBucket:
		m.refundTB(m.tokens, h, l, n)
	case LeakyPolicing:
		m.refundTB(m.leaky, h, l, n)
	case GCRA:
		m.refundTAT(m.tats, &m.index, h, l, n)
	case LeakyShaping:
		m.refundTAT(m.queues, nil, h, l, n)
	case FixedWindow:
		m.refundFixed(h, l, n, when)
	case SlidingWindow:
		m.refundSliding(h, l, n, when)
	case SlidingLog:
		m.refundLog(h, l, n, at)
	}
}

// forget drops every state kept under h, and the leases taken from it.
func (m *Machine) forget(h uint64) {
	drop(&m.index, m.tokens, h)
	drop(&m.index, m.leaky, h)
	drop(&m.index, m.tats, h)
	delete(m.queues, h)
	delete(m.fixed, h)
	delete(m.sliding, h)
	delete(m.logs, h)
	for _, id := range m.byKey[h] {
		if l, ok := m.leases[id]; ok && l.key == h {
			delete(m.leases, id)
		}
	}
	drop(&m.index, m.byKey, h)
}

func dur(ns int64) time.Duration {
	return time.Duration(max(0, ns))
}
