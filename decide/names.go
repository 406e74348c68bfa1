package decide

import (
	"time"

	"github.com/quorate/quorate/fsm"
)

// Name is the decision contract's name of a reason (docs/api.md), as the
// HTTP API, forward auth and the SDK's middleware write it: OVER_LIMIT
// names what ran out in a bucket of algorithm alg.
func (r Reason) Name(alg fsm.Algorithm) string {
	switch r {
	case OverLimit:
		switch alg {
		case fsm.TokenBucket, fsm.GCRA:
			return "TOKEN_BUCKET_EMPTY"
		case fsm.FixedWindow, fsm.SlidingWindow, fsm.SlidingLog:
			return "WINDOW_FULL"
		case fsm.LeakyPolicing, fsm.LeakyShaping:
			return "BUCKET_FULL"
		}
		return "OVER_LIMIT"
	case Unavailable:
		return "STORE_UNAVAILABLE"
	case NoPolicy:
		return "NO_MATCHING_POLICY"
	case ReasonUnspecified:
		return "UNSPECIFIED"
	}
	if int(r) < len(upperNames) {
		return upperNames[r]
	}
	return upper(r.String())
}

// upperNames are the reasons' contract names, made once: naming a reason
// is on every logged decision's path.
var upperNames = func() []string {
	out := make([]string, len(reasonLabels))
	for r, l := range reasonLabels {
		out[r] = upper(l)
	}
	return out
}()

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// Deciding is the result of the policy that decided a descriptor check
// (AppliedPolicyID), and the algorithm of its bucket that denied, else the
// policy's; ok is false when none did (no policy matched, a block).
func (a *Answer) Deciding() (pr PolicyResult, alg fsm.Algorithm, ok bool) {
	for _, p := range a.Policies {
		if p.PolicyID == a.AppliedPolicyID {
			pr, alg, ok = p, p.Algorithm, true
			break
		}
	}
	for _, r := range a.Results {
		if ok && r.PolicyID == pr.PolicyID && r.Reason == OverLimit {
			return pr, r.Algorithm, true
		}
	}
	return pr, alg, ok
}

// Delay is the longest wait a shaping or throttled bucket asked of an
// admitted request: the caller acts on it after that long.
func (a *Answer) Delay() time.Duration {
	var d time.Duration
	if a.Decision.Admits() {
		for _, r := range a.Results {
			if r.Decision.Admits() {
				d = max(d, r.Delay)
			}
		}
	}
	return d
}
