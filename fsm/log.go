package fsm

// logState is a sliding log: when each admitted unit was admitted, oldest
// first, as runs of units admitted at one instant. A take adds at most one
// run, so the state one op creates is a few words whatever its cost (one
// timestamp per unit let a request of 1,000 items of cost 10,000 grow every
// replica by about 150 MB: issue 13, finding 4), and a bucket holds at most
// Limit runs (MaxLogLimit). Pruning moves head; the slice is compacted only
// when more than half of it is dead, so each op costs O(1) amortized.
type logState struct {
	runs  []logRun // runs[head:] are live
	head  int
	count int64 // units in runs[head:]
	exp   int64 // newest + window: from then on the log is empty
}

// logRun is n units admitted at one machine time.
type logRun struct{ at, n int64 }

func (s *logState) live() []logRun { return s.runs[s.head:] }

func (s *logState) prune(now, w int64) {
	for s.head < len(s.runs) && s.runs[s.head].at <= now-w {
		s.count -= s.runs[s.head].n
		s.head++
	}
	if s.head > len(s.runs)/2 {
		s.runs = append(s.runs[:0], s.runs[s.head:]...)
		s.head = 0
	}
}

// add records n units admitted at now, the log's newest time.
func (s *logState) add(now, n int64) {
	if k := len(s.runs); k > s.head && s.runs[k-1].at == now {
		s.runs[k-1].n += n
	} else {
		s.runs = append(s.runs, logRun{now, n})
	}
	s.count += n
}

// expiring is when the oldest k live units have all slid out of a window
// of length w.
func (s *logState) expiring(k, w int64) int64 {
	for _, r := range s.live() {
		if k -= r.n; k <= 0 {
			return r.at + w
		}
	}
	return s.exp
}

func (m *Machine) takeLog(h uint64, l Limit, cost int64, commit bool) Result {
	w := int64(l.Period)
	s := m.logs[h]
	if s != nil && m.now >= s.exp {
		delete(m.logs, h)
		s = nil
	}
	var n int64
	if s != nil {
		s.prune(m.now, w)
		n = s.count
	}
	r := Result{Limit: l.Limit}
	if n+cost <= l.Limit {
		r.Allowed = true
		if commit && cost > 0 {
			if s == nil {
				s = &logState{}
				m.logs[h] = s
			}
			s.add(m.now, cost)
			s.exp = m.now + w
			n += cost
		}
	} else {
		r.RetryAfter = dur(s.expiring(n+cost-l.Limit, w) - m.now)
	}
	r.Remaining = max(0, l.Limit-n)
	if n > 0 {
		r.ResetAfter = dur(s.exp - m.now)
	}
	return r
}

// refundLog removes a take's own units (admitted at its decision time at),
// so a late refund does not free a newer unit that would expire later;
// without a time, the newest units.
func (m *Machine) refundLog(h uint64, l Limit, n, at int64) {
	s := m.logs[h]
	if s == nil || m.now >= s.exp {
		// An expired log reads as absent whether or not the sweeper has
		// deleted it yet; a refund must not bring it back (under a longer
		// period it did, and a replica restored from a snapshot, which
		// leaves expired state out, then decided differently).
		return
	}
	live := s.live()
	for i := len(live) - 1; i >= 0 && n > 0; i-- {
		if at > 0 && live[i].at != at {
			continue
		}
		k := min(n, live[i].n)
		live[i].n -= k
		s.count -= k
		n -= k
	}
	kept := live[:0]
	for _, r := range live {
		if r.n > 0 {
			kept = append(kept, r)
		}
	}
	s.runs = s.runs[:s.head+len(kept)]
	if len(kept) == 0 {
		delete(m.logs, h)
		return
	}
	// Never later than before: a refund under a longer period (the limit
	// changed) must not keep the log longer than its takes did.
	s.exp = min(s.exp, kept[len(kept)-1].at+int64(l.Period))
}
