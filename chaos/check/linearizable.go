package check

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/fsm/exact"
)

// bucket is the model's state: the token bucket of one key as fsm keeps it,
// plus the clock and log index the linearization has reached. Unknown ops
// that took from a full bucket leave its anchor known only to lie in
// [lo, hi]; later outcomes narrow the interval. It is a comparable value, so
// porcupine can compare states with ==.
type bucket struct {
	started bool   // false: no op yet, the bucket is full
	open    bool   // hi is the time of the next known op, not yet seen
	now     int64  // time of the last known op
	lo, hi  int64  // the anchor (start of the refill period) is in [lo, hi]
	base    int64  // tokens at the anchor, less any unknown op's debt
	shard   int    // the shard of the latest decision seen (a split moves keys to higher IDs)
	index   uint64 // highest Raft index seen in that shard's log
}

// longAgo stands for "before any time in the history": an anchor there has
// refilled any bucket by now, and t-longAgo still fits in an int64.
const longAgo = math.MinInt64 / 4

// tb is the limit in the integers the model needs.
type tb struct{ capacity, limit, period int64 }

func newTB(l fsm.Limit) tb {
	return tb{capacity: l.Capacity(), limit: l.Limit, period: int64(l.Period)}
}

// tokens is the whole tokens at t >= anchor, not capped, for the anchor a.
func (p tb) tokens(base, a, t int64) int64 {
	return exact.Add(base, exact.MulDiv(t-a, p.limit, p.period))
}

// latest is the latest anchor from which base has refilled to n tokens by
// t: floor((t-a)·Limit/Period) >= n-base exactly when a <= latest.
func (p tb) latest(base, n, t int64) int64 {
	if n <= base {
		return math.MaxInt64
	}
	return t - exact.MulDivCeil(n-base, p.period, p.limit)
}

// advance moves b to time t >= b.now exactly like fsm's view of a bucket: a
// bucket found full is re-anchored at t. An uncertain anchor may make it
// full or not: both are returned.
func (p tb) advance(b bucket, t int64) []bucket {
	if !b.started {
		return []bucket{{started: true, now: t, lo: t, hi: t, base: p.capacity, shard: b.shard, index: b.index}}
	}
	if b.open {
		b.open, b.hi = false, t
	}
	b.now = t
	if b.lo > b.hi {
		return nil
	}
	full := bucket{started: true, now: t, lo: t, hi: t, base: p.capacity, shard: b.shard, index: b.index}
	switch f := p.latest(b.base, p.capacity, t); {
	case b.hi <= f:
		return []bucket{full}
	case b.lo > f:
		return []bucket{b}
	default:
		b.lo = f + 1
		return []bucket{full, b}
	}
}

// step returns the states b can reach by op, or none if op is impossible.
func (p tb) step(b bucket, op *Operation) []bucket {
	if op.Outcome == Unknown {
		return p.unknown(b, op.Cost)
	}
	t := op.decided()
	if b.started && t < b.now {
		return nil // the state machine's clock never goes back
	}
	if op.Index != 0 {
		// Decisions of one key follow its log: (shard, index) never goes
		// back. A split's child decides only after its parent stopped.
		if op.Shard < b.shard || (op.Shard == b.shard && op.Index < b.index) {
			return nil
		}
		b.shard, b.index = op.Shard, op.Index
	}
	var out []bucket
	for _, b := range p.advance(b, t) {
		// Debts of unknown ops must have been repaid: tokens >= 0.
		b.hi = min(b.hi, p.latest(b.base, 0, t))
		switch op.Outcome {
		case Allowed:
			b.hi = min(b.hi, p.latest(b.base, op.Cost, t))
			b.base -= op.Cost
		case Denied:
			if l := p.latest(b.base, op.Cost, t); l == math.MaxInt64 {
				continue
			} else {
				b.lo = max(b.lo, l+1)
			}
		}
		if b.lo <= b.hi {
			out = append(out, b)
		}
	}
	return out
}

// unknown returns the states an op of unknown outcome can leave: it did not
// happen (or was denied); it took cost before the bucket was full again,
// which leaves a debt and the same anchor; or it took cost from a full
// bucket at a time between when the bucket could be full and the next known
// op, which re-anchors the bucket there.
func (p tb) unknown(b bucket, cost int64) []bucket {
	if !b.started {
		return []bucket{b, {started: true, open: true, now: longAgo, lo: longAgo, base: p.capacity - cost, shard: b.shard, index: b.index}}
	}
	debt := b
	debt.base -= cost
	fullAt := int64(longAgo)
	if b.lo > longAgo {
		fullAt = exact.Add(b.lo, exact.MulDivCeil(max(0, p.capacity-b.base), p.period, p.limit))
	}
	took := bucket{started: true, open: true, now: b.now, lo: max(b.now, fullAt), base: p.capacity - cost, shard: b.shard, index: b.index}
	return []bucket{b, debt, took}
}

// Model is the porcupine model of a token bucket of limit l, for histories
// whose Input is an *Operation (see Porcupine). It panics unless l is a
// valid TokenBucket limit.
func Model(l fsm.Limit) porcupine.Model {
	if err := l.Validate(); err != nil || l.Algorithm != fsm.TokenBucket {
		panic(fmt.Sprintf("check: need a valid token bucket limit, have %+v (%v)", l, err))
	}
	p := newTB(l)
	m := porcupine.NondeterministicModel{
		Init: func() []any { return []any{bucket{}} },
		Step: func(state, input, _ any) []any {
			next := p.step(state.(bucket), input.(*Operation))
			out := make([]any, len(next))
			for i := range next {
				out[i] = next[i]
			}
			return out
		},
		Equal: func(a, b any) bool { return a == b },
		Hash: func(s any) uint64 {
			b := s.(bucket)
			h := uint64(b.now)*0x9e3779b97f4a7c15 ^ uint64(b.lo)*0xbf58476d1ce4e5b9 ^ uint64(b.hi)*0xff51afd7ed558ccd
			return h ^ uint64(b.base)*0x94d049bb133111eb ^ b.index ^ uint64(b.shard)<<48
		},
		DescribeOperation: func(input, _ any) string {
			op := input.(*Operation)
			if op.Outcome == Unknown {
				return fmt.Sprintf("take(%d) -> ?", op.Cost)
			}
			return fmt.Sprintf("take(%d) -> %s @%d #%d/%d", op.Cost, op.Outcome, op.DecidedAt, op.Shard, op.Index)
		},
		DescribeState: func(s any) string {
			b := s.(bucket)
			switch {
			case !b.started:
				return fmt.Sprintf("full (%d)", p.capacity)
			case b.open:
				return fmt.Sprintf("%d tokens at an anchor after %d", b.base, b.lo)
			case b.lo == b.hi:
				return fmt.Sprintf("%d tokens @%d", p.tokens(b.base, b.lo, b.now), b.now)
			}
			return fmt.Sprintf("%d..%d tokens @%d", p.tokens(b.base, b.hi, b.now), p.tokens(b.base, b.lo, b.now), b.now)
		},
	}
	return m.ToModel()
}

// Porcupine converts a history to porcupine's operations. Unknown ops never
// return: their command may be applied long after the client gave up.
func Porcupine(ops []Operation) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i := range ops {
		op := &ops[i]
		ret := op.Return
		if op.Outcome == Unknown {
			ret = math.MaxInt64
		}
		out[i] = porcupine.Operation{ClientId: op.Client, Input: op, Call: op.Call, Output: op.Outcome, Return: ret}
	}
	return out
}

// CheckLinearizable reports whether ops, all on one key limited by l, are
// linearizable with respect to an exact token bucket. The info can be
// passed to Visualize. It panics unless l is a valid TokenBucket limit.
func CheckLinearizable(l fsm.Limit, ops []Operation) (bool, porcupine.LinearizationInfo) {
	res, info := CheckLinearizableTimeout(l, ops, 0)
	return res == porcupine.Ok, info
}

// CheckLinearizableTimeout is CheckLinearizable giving up after timeout
// (0 for none), in which case the result is porcupine.Unknown.
func CheckLinearizableTimeout(l fsm.Limit, ops []Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(Model(l), Porcupine(ops), timeout)
}

// Visualize writes porcupine's HTML visualization of a checked history to
// path.
func Visualize(l fsm.Limit, info porcupine.LinearizationInfo, path string) error {
	return porcupine.VisualizePath(Model(l), info, path)
}
