package bench

import "sync/atomic"

// Live is a run's running totals, updated as requests complete, for a
// progress display. The zero value is ready to use.
type Live struct {
	requests, checks, errors atomic.Int64
}

// Snapshot returns the totals so far.
func (l *Live) Snapshot() (requests, checks, errors int64) {
	return l.requests.Load(), l.checks.Load(), l.errors.Load()
}

func (l *Live) add(checks int64, failed bool) {
	if l == nil {
		return
	}
	l.requests.Add(1)
	l.checks.Add(checks)
	if failed {
		l.errors.Add(1)
	}
}
