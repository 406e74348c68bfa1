package fsm

import (
	"fmt"
	"time"

	"github.com/quorate/quorate/fsm/exact"
)

// Algorithm names a bucket algorithm. The zero value is invalid so that a
// forgotten field is an error, not a silent default.
type Algorithm uint8

// The algorithms. Values are part of the wire and snapshot formats: append only.
const (
	AlgorithmUnspecified Algorithm = iota
	// TokenBucket holds up to Burst tokens and refills Limit tokens per
	// Period; a request takes Cost tokens.
	TokenBucket
	// GCRA is the generic cell rate algorithm: Limit per Period with Burst
	// requests allowed at once. It decides exactly like a token bucket but
	// keeps one timestamp per key. (redis-cell's max_burst is Burst-1.)
	GCRA
	// SlidingWindow is the sliding-window counter: Limit per Period, with
	// estimate = current + previous × (1 − elapsed/Period).
	SlidingWindow
	// FixedWindow counts up to Limit per Period-long window aligned to the
	// Unix epoch. It admits up to 2×Limit across a window boundary.
	FixedWindow
	// SlidingLog is exact: at most Limit in any Period-long interval. It keeps
	// the time of every admission for a Period, so Limit is capped at
	// MaxLogLimit and Period at MaxLogPeriod.
	SlidingLog
	// LeakyPolicing is a leaky bucket of capacity Burst leaking Limit per
	// Period that denies what would overflow.
	LeakyPolicing
	// LeakyShaping is a leaky bucket used as a queue: it admits up to Burst
	// queued units and tells each request how long to wait (Result.Delay), so
	// the downstream sees a smooth Limit per Period.
	LeakyShaping
	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	"unspecified", "token_bucket", "gcra", "sliding_window", "fixed_window",
	"sliding_log", "leaky_bucket_policing", "leaky_bucket_shaping",
}

func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm is the inverse of Algorithm.String.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames[1:] {
		if n == s {
			return Algorithm(i + 1), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want one of token_bucket, gcra, sliding_window, fixed_window, sliding_log, leaky_bucket_policing, leaky_bucket_shaping)", ErrUnknownAlgorithm, s)
}

// Leasable reports whether budget of this algorithm can be granted ahead of
// use without risking over-admission. A sliding log must know when each unit
// is spent, and a shaper must place each request in its queue, so neither can.
func (a Algorithm) Leasable() bool {
	switch a {
	case TokenBucket, GCRA, SlidingWindow, FixedWindow, LeakyPolicing:
		return true
	}
	return false
}

// Bounds on input. They keep every product of a count and a duration inside
// the 128-bit intermediates of arith.go and bound memory per key.
const (
	MaxKeyLen    = 1024
	MaxHolderLen = 256
	MaxLimit     = 1 << 40
	MinPeriod    = time.Millisecond
	MaxPeriod    = 366 * 24 * time.Hour
	// MaxLogLimit and MaxLogPeriod bound a sliding log: it holds one
	// (time, count) run per admission instant, at most MaxLogLimit runs
	// (160 KB) per key, each kept for the period. A take adds at most one
	// run, whatever its cost.
	MaxLogLimit  = 10_000
	MaxLogPeriod = 24 * time.Hour
	// MaxRefill bounds how long an empty bucket takes to refill
	// (capacity × period / limit): ten years keeps every time the machine
	// computes far inside int64 nanoseconds.
	MaxRefill = 10 * 366 * 24 * time.Hour
	// MinInterval is the shortest time per unit GCRA and the shaper accept.
	// They round the interval up to whole nanoseconds, so at 1µs the
	// rounding costs at most 0.1% of the rate; faster limits should use the
	// token bucket, which refills exactly.
	MinInterval = time.Microsecond
)

// Limit is a bucket's configuration. It travels with every operation rather
// than living in the state, so a limit can change at run time and the next
// operation simply uses the new one.
type Limit struct {
	Algorithm Algorithm
	// Limit is the sustained rate (tokens per Period) or, for windows and the
	// sliding log, the number admitted per Period.
	Limit int64
	// Period is the refill period or the window length.
	Period time.Duration
	// Burst is the capacity of token and leaky buckets and the burst of GCRA.
	// Zero means Limit. Windows and the log ignore it.
	Burst int64
}

// Capacity is the most a bucket can admit at once, which is what responses
// report as the limit.
func (l Limit) Capacity() int64 {
	switch l.Algorithm {
	case TokenBucket, GCRA, LeakyPolicing, LeakyShaping:
		if l.Burst > 0 {
			return l.Burst
		}
	}
	return l.Limit
}

// Validate reports the first problem with l, wrapping one of the package's
// errors with the offending value.
func (l Limit) Validate() error {
	if l.Algorithm == AlgorithmUnspecified || l.Algorithm >= numAlgorithms {
		return fmt.Errorf("%w: %d", ErrUnknownAlgorithm, l.Algorithm)
	}
	if l.Limit < 1 || l.Limit > MaxLimit {
		return fmt.Errorf("%w: %d not in [1, %d]", ErrLimit, l.Limit, int64(MaxLimit))
	}
	if l.Burst < 0 || l.Burst > MaxLimit {
		return fmt.Errorf("%w: %d not in [0, %d]", ErrBurst, l.Burst, int64(MaxLimit))
	}
	if l.Period < MinPeriod || l.Period > MaxPeriod {
		return fmt.Errorf("%w: %s not in [%s, %s]", ErrPeriod, l.Period, MinPeriod, MaxPeriod)
	}
	if l.Algorithm == SlidingLog && l.Limit > MaxLogLimit {
		return fmt.Errorf("%w: %d > %d (use sliding_window for large limits)", ErrLogTooLarge, l.Limit, MaxLogLimit)
	}
	if l.Algorithm == SlidingLog && l.Period > MaxLogPeriod {
		return fmt.Errorf("%w: %s > %s for sliding_log, which keeps every admission for the period (use sliding_window for long periods)", ErrPeriod, l.Period, MaxLogPeriod)
	}
	if int64(l.Period) < l.Limit {
		return fmt.Errorf("%w: %s is shorter than one nanosecond per unit at limit %d", ErrPeriod, l.Period, l.Limit)
	}
	switch l.Algorithm {
	case GCRA, LeakyShaping:
		if l.interval() < int64(MinInterval) {
			return fmt.Errorf("%w: %d per %s is faster than one per %s (use token_bucket)", ErrLimit, l.Limit, l.Period, MinInterval)
		}
		fallthrough
	case TokenBucket, LeakyPolicing:
		if refill := exact.MulDivCeil(l.Capacity(), int64(l.Period), l.Limit); refill > int64(MaxRefill) {
			return fmt.Errorf("%w: %d at %d per %s takes more than %s to refill", ErrBurst, l.Capacity(), l.Limit, l.Period, MaxRefill)
		}
	}
	return nil
}

// interval is the time one unit takes to refill or leak, rounded up so that
// rounding can only ever under-admit.
func (l Limit) interval() int64 {
	return (int64(l.Period) + l.Limit - 1) / l.Limit
}
