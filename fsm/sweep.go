package fsm

// Memory is bounded by active keys: state that is equivalent to no state
// (a full bucket, a window that has slid out, an expired lease or idempotency
// record) carries its own expiry, every lookup treats it as absent from then
// on, and the sweeper deletes it a few entries at a time.
//
// The sweeper walks Go maps, whose order is random, so replicas delete
// different entries at different times. That is harmless by construction:
// an expired entry reads exactly like a missing one, and snapshots skip
// expired entries, so results and snapshot bytes never depend on it.

const numTables = 10

// sweepBatch is the fewest entries swept at once: starting a walk of a map
// costs about as much as a Take, so walks are batched.
const sweepBatch = 64

// sweepBudget is the entries a command with n ops owes the sweeper: two per
// op keeps pace with the keys ops create, and a command without ops, the
// leader's idle tick, does a larger share of the cleaning.
func sweepBudget(n int) int {
	if n == 0 {
		return 256
	}
	return 2 * n
}

// sweep examines up to n entries of the next non-empty table.
func (m *Machine) sweep(n int) {
	for range numTables {
		t := m.sweepNext
		m.sweepNext = (m.sweepNext + 1) % numTables
		if m.sweepTable(t, n) {
			return
		}
	}
}

// sweepTable sweeps table t and reports whether it had entries.
func (m *Machine) sweepTable(t, n int) bool {
	now := m.now
	switch t {
	case 0:
		return sweepMap(m.tokens, &m.index, n, now, tbDead)
	case 1:
		return sweepMap(m.leaky, &m.index, n, now, tbDead)
	case 2:
		return sweepMap(m.tats, &m.index, n, now, tatDead)
	case 3:
		return sweepMap(m.queues, nil, n, now, tatDead)
	case 4:
		return sweepMap(m.fixed, nil, n, now, fwDead)
	case 5:
		return sweepMap(m.sliding, nil, n, now, swDead)
	case 6:
		return sweepMap(m.logs, nil, n, now, logDead)
	case 7:
		return sweepMap(m.leases, nil, n, now, leaseDead)
	case 8:
		return sweepMap(m.idem, nil, n, now, idemDead)
	default:
		return m.sweepIndex(n)
	}
}

// sweepIndex drops lease index entries whose leases are all gone.
func (m *Machine) sweepIndex(n int) bool {
	if len(m.byKey) == 0 {
		return false
	}
	for h, ids := range m.byKey {
		dead := true
		for _, id := range ids {
			if l, ok := m.leases[id]; ok && !leaseDead(l, m.now) {
				dead = false
				break
			}
		}
		if dead {
			m.index.remove(h)
			delete(m.byKey, h)
		}
		if n--; n <= 0 {
			break
		}
	}
	return true
}

// sweepMap deletes dead entries of t, and from x, the index that follows
// t (or nil).
func sweepMap[V any](t map[uint64]V, x *bucketIndex, n int, now int64, dead func(V, int64) bool) bool {
	if len(t) == 0 {
		return false
	}
	for k, v := range t {
		if dead(v, now) {
			if x != nil {
				x.remove(k)
			}
			delete(t, k)
		}
		if n--; n <= 0 {
			break
		}
	}
	return true
}

func tbDead(s tbState, now int64) bool     { return now >= s.full() }
func tatDead(tat, now int64) bool          { return tat <= now }
func fwDead(s fwState, now int64) bool     { return now >= s.end }
func swDead(s swState, now int64) bool     { return now >= s.exp }
func logDead(s *logState, now int64) bool  { return now >= s.exp }
func idemDead(e idemEntry, now int64) bool { return now >= e.exp }
