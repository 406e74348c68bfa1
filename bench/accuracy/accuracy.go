// Package accuracy is quorate bench's admission accountant: given every check
// a run sent, when each was decided and whether it was admitted, it computes
// what an exact limiter would have allowed for the same arrivals and reports
// the difference as over-admission (admitted beyond the limit) and
// under-admission (denied although the limit had room).
//
// The exact limiter is each algorithm's own arithmetic, in exact integer
// (128-bit) form, applied to a bucket's arrivals in the order of their
// decision times, admitting whenever the check fits: what a perfect,
// single-threaded limiter with the same clock would have done. It is written
// independently of quorate's state machine on purpose, so that the tool can
// catch a bug there instead of repeating it.
//
// For one bucket:
//
//   - allowed by limit: the checks the exact limiter admits when it replays
//     every arrival (refunded ones excepted, see Arrival.Refunded);
//   - over-admitted: admitted checks that do not fit even when the exact
//     limiter replays only the admitted ones, i.e. how many admissions must
//     be taken away before what was admitted respects the limit;
//   - under-admitted: allowed by limit minus the admitted checks that fit.
//
// With equal costs, admitting whenever a check fits admits the most checks a
// token bucket can, so "allowed by limit" is an upper bound for any correct
// token-bucket limiter and over-admission is never hidden by ordering.
package accuracy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors of this package.
var (
	// ErrAlgorithm: the algorithm has no reference here.
	ErrAlgorithm = errors.New("accuracy: unknown algorithm")
	// ErrLimit: the limit is not positive, or the period is shorter than
	// one nanosecond per unit.
	ErrLimit = errors.New("accuracy: invalid limit")
)

// Family is the arithmetic an algorithm admits by. Several of quorate's
// algorithms admit alike: GCRA and both leaky buckets decide exactly like a
// token bucket of capacity Burst (GCRA rounds its interval up to whole
// nanoseconds, which can only under-admit, by at most 0.1%).
type Family uint8

// The families.
const (
	TokenBucket Family = iota + 1
	SlidingWindow
	FixedWindow
	SlidingLog
)

func (f Family) String() string {
	switch f {
	case TokenBucket:
		return "token_bucket"
	case SlidingWindow:
		return "sliding_window"
	case FixedWindow:
		return "fixed_window"
	case SlidingLog:
		return "sliding_log"
	}
	return fmt.Sprintf("Family(%d)", uint8(f))
}

// FamilyOf returns the family of the algorithm called name (quorate's short
// names: token_bucket, gcra, sliding_window, fixed_window, sliding_log,
// leaky_bucket_policing, leaky_bucket_shaping).
func FamilyOf(name string) (Family, error) {
	switch name {
	case "token_bucket", "gcra", "leaky_bucket_policing", "leaky_bucket_shaping":
		return TokenBucket, nil
	case "sliding_window":
		return SlidingWindow, nil
	case "fixed_window":
		return FixedWindow, nil
	case "sliding_log":
		return SlidingLog, nil
	}
	return 0, fmt.Errorf("%w %q", ErrAlgorithm, name)
}

// Limit is the limit every bucket of a run had.
type Limit struct {
	Family Family
	// Limit is the units admitted per Period.
	Limit int64
	// Period is the refill period or window length. Windows are aligned to
	// the Unix epoch, as quorate and the Redis baseline align them.
	Period time.Duration
	// Burst is the token bucket's capacity; 0 means Limit. Windows ignore it.
	Burst int64
}

func (l Limit) validate() error {
	switch l.Family {
	case TokenBucket, SlidingWindow, FixedWindow, SlidingLog:
	default:
		return fmt.Errorf("%w: %v", ErrAlgorithm, l.Family)
	}
	if l.Limit < 1 || l.Burst < 0 || l.Period < 1 || int64(l.Period) < l.Limit {
		return fmt.Errorf("%w: %d per %v, burst %d", ErrLimit, l.Limit, l.Period, l.Burst)
	}
	return nil
}

func (l Limit) capacity() int64 {
	if l.Family == TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Arrival is one check as the limiter decided it.
type Arrival struct {
	// Bucket identifies the bucket (limit name and key) the check counted
	// against.
	Bucket uint64
	// At is when the check was decided, in Unix nanoseconds: the limiter's
	// own time when it reports one (quorate's decided_at, the Redis script's
	// clamped now), which makes the replay exact.
	At int64
	// Cost is the units the check took; at least 1.
	Cost int64
	// Admitted: the limiter let the check through (including fail-open).
	Admitted bool
	// Refunded: the bucket had room, but another check of the same request
	// was denied, so the request was denied as a whole and this check's
	// charge given back. It is neither admitted nor demand on the bucket: an
	// exact limiter with the same all-or-nothing requests would also have
	// given it back.
	Refunded bool
	// Checks is the number of checks the arrival stands for: several
	// checks of one request on the same bucket are one arrival of their
	// summed cost, because the request takes them together or not at all.
	// 0 means 1.
	Checks int64
	// Sent is when the request carrying the check was sent (Unix ns), or 0.
	Sent int64
	// Prepaid: the check was decided from budget charged before its
	// decision (a quorate lease), so the limiter charged the bucket
	// earlier than At. See Account.
	Prepaid bool
}

func (a Arrival) checks() int64 { return max(a.Checks, 1) }

// Report is the accountant's verdict, in checks.
type Report struct {
	Checks         int64 // arrivals accounted
	Admitted       int64 // arrivals the limiter admitted
	AllowedByLimit int64 // arrivals an exact limiter would have admitted
	OverAdmitted   int64 // admitted beyond the limit
	UnderAdmitted  int64 // denied although the limit had room
	Buckets        int64 // distinct buckets
}

// Add accumulates o into r (rounds of a run use separate buckets).
func (r *Report) Add(o Report) {
	r.Checks += o.Checks
	r.Admitted += o.Admitted
	r.AllowedByLimit += o.AllowedByLimit
	r.OverAdmitted += o.OverAdmitted
	r.UnderAdmitted += o.UnderAdmitted
	r.Buckets += o.Buckets
}

// Ratio is admitted / allowed by limit: 1 for an exact limiter, below 1 when
// it under-admits, above when it over-admits. It is 1 when nothing was
// allowed and nothing admitted.
func (r Report) Ratio() float64 {
	if r.AllowedByLimit == 0 {
		if r.Admitted == 0 {
			return 1
		}
		return float64(r.Admitted)
	}
	return float64(r.Admitted) / float64(r.AllowedByLimit)
}

// Account replays arrivals under l and reports the admission accuracy. It
// sorts arrivals in place by bucket and time; arrivals of one bucket decided
// at the same instant keep their given order (with equal costs, order within
// an instant changes no count).
//
// Prepaid (leased) checks are timed when the lease is spent, but the bucket
// was charged when the lease was granted, and the first lease of a bucket
// is granted in answer to the first request that needs it: so when a
// bucket's first decision is prepaid, the exact limiter takes that first
// charge as early as the first request to the bucket was sent. Without
// this, the refill of a fresh bucket would start up to a round trip later
// for the reference than for the limiter, and a correct leased limiter
// would show about rate × round trip checks of over-admission.
func Account(l Limit, arrivals []Arrival) (Report, error) {
	if err := l.validate(); err != nil {
		return Report{}, err
	}
	slices.SortStableFunc(arrivals, func(a, b Arrival) int {
		if c := cmp.Compare(a.Bucket, b.Bucket); c != 0 {
			return c
		}
		return cmp.Compare(a.At, b.At)
	})
	var r Report
	for len(arrivals) > 0 {
		n := 1
		for n < len(arrivals) && arrivals[n].Bucket == arrivals[0].Bucket {
			n++
		}
		r.Add(accountBucket(l, arrivals[:n]))
		arrivals = arrivals[n:]
	}
	return r, nil
}

// accountBucket accounts the time-ordered arrivals of one bucket.
func accountBucket(l Limit, as []Arrival) Report {
	r := Report{Buckets: 1}
	// origin is when the first charge may have been taken (see Account).
	origin := as[0].At
	if as[0].Prepaid {
		for _, a := range as {
			if a.Sent > 0 && a.Sent < origin {
				origin = a.Sent
			}
		}
	}
	all, admitted := newReference(l), newReference(l)
	firstAll, firstAdmitted := true, true
	for _, a := range as {
		cost, n := max(a.Cost, 1), a.checks()
		r.Checks += n
		if a.Admitted {
			r.Admitted += n
			at := a.At
			if firstAdmitted && a.Prepaid {
				at = min(at, origin)
			}
			firstAdmitted = false
			if !admitted.take(at, cost) {
				r.OverAdmitted += n
			}
		}
		if a.Refunded {
			continue
		}
		at := a.At
		if firstAll && a.Prepaid {
			at = min(at, origin)
		}
		firstAll = false
		if all.take(at, cost) {
			r.AllowedByLimit += n
		}
	}
	r.UnderAdmitted = max(0, r.AllowedByLimit-(r.Admitted-r.OverAdmitted))
	return r
}

// reference is an exact limiter for one bucket, fed in time order.
type reference interface {
	// take admits cost units at time at (Unix ns, never before the previous
	// call's) if they fit, and reports whether they did.
	take(at, cost int64) bool
}

func newReference(l Limit) reference {
	switch l.Family {
	case SlidingWindow:
		return &slidingWindow{l: l}
	case FixedWindow:
		return &fixedWindow{l: l}
	case SlidingLog:
		return &slidingLog{l: l}
	}
	return &tokenBucket{l: l, capacity: mul(uint64(l.capacity()), uint64(l.Period))}
}
