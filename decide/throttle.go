package decide

// throttle turns the answers of throttled buckets (policy.Delay: a THROTTLE
// policy's, a SOFT policy's friction) into waits, and a request they hold
// into a THROTTLE. Their shaper admitted each unit at its turn, so the wait
// is the time to that turn past the policy's burst; a SOFT policy's full
// queue still admits, with the most friction. A denied request's buckets
// were refunded and stay denied. The numbers are the policy's: its
// capacity, not the shaper's queue.
func throttle(items []item, results []Result, d Decision) Decision {
	for i := range items {
		dl := items[i].delay
		r := &results[i]
		if !dl.Throttled() {
			continue
		}
		r.Limit, r.Remaining = dl.Burst, max(0, r.Remaining-dl.Queued(items[i].op.Limit))
		switch {
		case r.Reason == FailOpen:
			// Admitted uncharged while the shard could not decide: no turn.
		case d == Deny:
			r.Delay = 0
		case r.Decision == Allow:
			if r.Delay = dl.Wait(r.Delay, items[i].op.Cost); r.Delay > 0 {
				r.Decision, r.Reason = Throttle, Throttled
			}
		case r.Decision == Deny && r.Reason == OverLimit && items[i].soft:
			r.Decision, r.Delay = Throttle, dl.Max
		}
		if r.Decision == Throttle {
			if items[i].soft {
				r.Reason = OverLimitSoft
			}
			d = Throttle
		}
	}
	return d
}
