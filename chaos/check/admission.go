package check

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/fsm/exact"
)

// Report is the admission accountant's verdict on a history.
type Report struct {
	Allowed, Denied, Unknown int   // ops by outcome
	AllowedCost              int64 // units the history admitted

	// OverAdmitted counts the ALLOWs that, taken in decision order, bring
	// what the history admitted over some interval [s, t] of decision
	// times above capacity + floor((t-s)·Limit/Period).
	OverAdmitted int
	// MaxExcess is the largest excess over that bound, and Worst the
	// interval where it occurs.
	MaxExcess int64
	Worst     Interval

	// ReferenceAllowed is the cost an exact token bucket admits when fed the
	// Allowed and Denied ops in decision order; UnderAdmitted is how much
	// less the history admitted (0 if not less).
	ReferenceAllowed int64
	UnderAdmitted    int64
	// DeniedWithTokens counts DENYs although a bucket charged with the
	// history's own ALLOWs had the tokens.
	DeniedWithTokens int
}

// Interval is a window of decision times and what was admitted in it.
type Interval struct {
	From, To        int64 // Unix ns, inclusive
	Admitted, Bound int64
}

// OK reports whether the history never over-admitted. Under-admission is
// allowed: it is safe, and faults cause it legitimately.
func (r Report) OK() bool { return r.OverAdmitted == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("%d allowed (%d units), %d denied, %d unknown", r.Allowed, r.AllowedCost, r.Denied, r.Unknown)
	if r.OverAdmitted > 0 {
		s += fmt.Sprintf("; OVER-ADMITTED %d times, max excess %d: %d admitted in [%d, %d], bound %d",
			r.OverAdmitted, r.MaxExcess, r.Worst.Admitted, r.Worst.From, r.Worst.To, r.Worst.Bound)
	}
	return s + fmt.Sprintf("; reference admits %d units, under-admitted %d, %d denied with tokens",
		r.ReferenceAllowed, r.UnderAdmitted, r.DeniedWithTokens)
}

// CheckAdmission accounts for the admissions in ops, all on one key limited
// by l, using each op's DecidedAt (its Return time when absent). Unknown ops
// are counted and otherwise ignored: clients never saw them admitted. It
// panics unless l is a valid TokenBucket limit. It takes O(n²) time in the
// number of ALLOWs.
func CheckAdmission(l fsm.Limit, ops []Operation) Report {
	if err := l.Validate(); err != nil || l.Algorithm != fsm.TokenBucket {
		panic(fmt.Sprintf("check: need a valid token bucket limit, have %+v (%v)", l, err))
	}
	p := newTB(l)
	var r Report
	var known []*Operation
	for i := range ops {
		op := &ops[i]
		switch op.Outcome {
		case Allowed:
			r.Allowed++
			r.AllowedCost += op.Cost
		case Denied:
			r.Denied++
		default:
			r.Unknown++
			continue
		}
		known = append(known, op)
	}
	// Decision order: time, then log index, then call.
	slices.SortStableFunc(known, func(a, b *Operation) int {
		return cmp.Or(cmp.Compare(a.decided(), b.decided()), cmp.Compare(a.Index, b.Index), cmp.Compare(a.Call, b.Call))
	})

	// Over-admission: for every ALLOW, every interval from an earlier
	// ALLOW's time to its own, counting the ALLOWs up to it in order.
	var allows []*Operation
	for _, op := range known {
		if op.Outcome == Allowed {
			allows = append(allows, op)
		}
	}
	for j := range allows {
		t, admitted, over := allows[j].decided(), int64(0), false
		for i := j; i >= 0; i-- {
			admitted += allows[i].Cost
			s := allows[i].decided()
			if i > 0 && allows[i-1].decided() == s {
				continue // an interval starting at s holds all of s's ALLOWs
			}
			bound := exact.Add(p.capacity, exact.MulDiv(t-s, p.limit, p.period))
			if excess := admitted - bound; excess > 0 {
				over = true
				if excess > r.MaxExcess {
					r.MaxExcess = excess
					r.Worst = Interval{From: s, To: t, Admitted: admitted, Bound: bound}
				}
			}
		}
		if over {
			r.OverAdmitted++
		}
	}

	// Under-admission: an exact bucket making its own decisions, and one
	// charged with the history's.
	var ref, own bucket
	for _, op := range known {
		t := op.decided()
		// Both anchors are exact (lo == hi), so advance has one answer.
		ref, own = p.advance(ref, max(t, ref.now))[0], p.advance(own, max(t, own.now))[0]
		if p.tokens(ref.base, ref.lo, ref.now) >= op.Cost {
			ref.base -= op.Cost
			r.ReferenceAllowed += op.Cost
		}
		has := p.tokens(own.base, own.lo, own.now) >= op.Cost
		switch {
		case op.Outcome == Allowed:
			own.base -= op.Cost
		case has:
			r.DeniedWithTokens++
		}
	}
	r.UnderAdmitted = max(0, r.ReferenceAllowed-r.AllowedCost)
	return r
}
