package accuracy

import "math/bits"

// tokenBucket holds capacity tokens and refills Limit per Period
// continuously. Tokens are kept scaled by Period (one token is Period
// "token-nanoseconds"), so refilling for e nanoseconds adds exactly
// e·Limit and no fraction of a token is ever rounded away.
type tokenBucket struct {
	l        Limit
	capacity u128 // capacity · Period
	scaled   u128 // tokens · Period
	last     int64
	started  bool
}

func (b *tokenBucket) take(at, cost int64) bool {
	switch {
	case !b.started:
		// A bucket never touched before the run is full: the tool uses
		// fresh buckets for every run.
		b.scaled, b.last, b.started = b.capacity, at, true
	case at > b.last:
		b.scaled = b.scaled.add(mul(uint64(at-b.last), uint64(b.l.Limit)))
		if b.capacity.less(b.scaled) {
			b.scaled = b.capacity
		}
		b.last = at
	}
	need := mul(uint64(cost), uint64(b.l.Period))
	if b.scaled.less(need) {
		return false
	}
	b.scaled = b.scaled.sub(need)
	return true
}

// slidingWindow is the sliding-window counter: windows of length Period
// aligned to the Unix epoch, and a check fits while
// current + cost + previous·(Period − elapsed)/Period ≤ Limit, exactly.
type slidingWindow struct {
	l         Limit
	start     int64 // start of the window cur counts
	cur, prev int64
}

func (s *slidingWindow) take(at, cost int64) bool {
	w := int64(s.l.Period)
	start := at - at%w
	switch start {
	case s.start:
	case s.start + w:
		s.prev, s.cur = s.cur, 0
	default:
		s.prev, s.cur = 0, 0
	}
	s.start = start
	room := s.l.Limit - s.cur - cost
	if room < 0 {
		return false
	}
	// prev·(w−elapsed) ≤ room·w, in 128 bits.
	if mul(uint64(room), uint64(w)).less(mul(uint64(s.prev), uint64(w-(at-start)))) {
		return false
	}
	s.cur += cost
	return true
}

// fixedWindow counts up to Limit per epoch-aligned window of length Period.
type fixedWindow struct {
	l     Limit
	start int64
	count int64
}

func (f *fixedWindow) take(at, cost int64) bool {
	w := int64(f.l.Period)
	if start := at - at%w; start != f.start {
		f.start, f.count = start, 0
	}
	if f.count+cost > f.l.Limit {
		return false
	}
	f.count += cost
	return true
}

// slidingLog admits at most Limit units in any Period-long interval
// (now−Period, now]: a unit admitted at t stops counting at t+Period.
type slidingLog struct {
	l  Limit
	ts []int64 // one entry per admitted unit, oldest first
}

func (s *slidingLog) take(at, cost int64) bool {
	i := 0
	for i < len(s.ts) && s.ts[i] <= at-int64(s.l.Period) {
		i++
	}
	s.ts = s.ts[i:]
	if int64(len(s.ts))+cost > s.l.Limit {
		return false
	}
	for range cost {
		s.ts = append(s.ts, at)
	}
	return true
}

// u128 is an unsigned 128-bit integer: products of a count and a duration
// in nanoseconds overflow 64 bits (2^40 units × a year).
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func (x u128) add(y u128) u128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return u128{hi, lo}
}

// sub returns x−y; x must not be less than y.
func (x u128) sub(y u128) u128 {
	lo, b := bits.Sub64(x.lo, y.lo, 0)
	hi, _ := bits.Sub64(x.hi, y.hi, b)
	return u128{hi, lo}
}

func (x u128) less(y u128) bool {
	return x.hi < y.hi || (x.hi == y.hi && x.lo < y.lo)
}
