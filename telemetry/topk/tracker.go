package topk

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tracker keeps the sketches of every policy a node decides. It is safe
// for concurrent use: each policy has its own mutex, and the table of
// policies is a sync.Map, so observations of different policies do not
// contend and a tracked policy is found without a lock.
type Tracker struct {
	cfg      Config
	longest  int64 // the longest window, ns: a policy idle for as long is empty
	shortest int64 // the shortest slot, ns: prune at most this often

	policies  sync.Map     // policy id -> *policyState
	count     atomic.Int64 // entries in policies
	lastPrune atomic.Int64 // Unix ns
	mu        sync.Mutex   // serializes adding and pruning policies

	metrics
}

// New returns a tracker sized by cfg (see Config for the defaults).
func New(cfg Config) (*Tracker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t := &Tracker{cfg: cfg}
	// Windows are sorted, and their slots multiples of the first's.
	t.shortest = int64(cfg.Windows[0].slot())
	t.longest = int64(cfg.Windows[len(cfg.Windows)-1].Length)
	t.metrics = newMetrics(t)
	return t, nil
}

// K is the counters of each sketch.
func (t *Tracker) K() int { return t.cfg.K }

// Windows are the window lengths Top answers for, shortest first.
func (t *Tracker) Windows() []time.Duration {
	out := make([]time.Duration, len(t.cfg.Windows))
	for i, w := range t.cfg.Windows {
		out[i] = w.Length
	}
	return out
}

// Observe counts one decided check of policy's bucket key: a hit of
// weight cost and, if denied, a denial. A negative cost, an empty or
// overlong policy id or an overlong key is dropped and counted, as is a
// policy past MaxPolicies. A key already tracked costs no allocation.
func (t *Tracker) Observe(policy, key string, cost int64, denied bool, now time.Time) {
	if cost < 0 || policy == "" || len(policy) > MaxPolicyLen || len(key) > MaxKeyLen {
		t.droppedInvalid.Inc()
		return
	}
	if cost == 0 && !denied {
		return
	}
	ns := now.UnixNano()
	kc := keyCopy{src: key}
	for range 2 { // a policy pruned under us is looked up again, once
		p := t.policy(policy, ns)
		if p == nil {
			return
		}
		p.mu.Lock()
		if !p.dead {
			t.observeLocked(p, &kc, cost, denied, ns)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	t.droppedPolicies.Inc() // pruned twice: only with clocks an hour apart
}

func (t *Tracker) observeLocked(p *policyState, kc *keyCopy, cost int64, denied bool, ns int64) {
	p.last = max(p.last, ns)
	if cost > 0 {
		t.seriesLocked(p, Hits).add(kc, cost, ns)
	}
	if denied {
		t.seriesLocked(p, Denied).add(kc, 1, ns)
	}
}

// seriesLocked returns the policy's series of kind, made on its first
// observation: a policy that never denies never holds Denied sketches.
func (t *Tracker) seriesLocked(p *policyState, kind Kind) *series {
	if p.kinds[kind] == nil {
		p.kinds[kind] = newSeries(t.cfg.Windows, t.cfg.K)
	}
	return p.kinds[kind]
}

// policy finds or adds a policy's state; nil when the table is full.
func (t *Tracker) policy(name string, ns int64) *policyState {
	if v, ok := t.policies.Load(name); ok {
		return v.(*policyState)
	}
	// Full and not due to prune: drop without taking the table's lock, so
	// a flood of new policies does not serialize the checks.
	if t.count.Load() >= int64(t.cfg.MaxPolicies) && ns-t.lastPrune.Load() < t.shortest {
		t.droppedPolicies.Inc()
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.policies.Load(name); ok {
		return v.(*policyState)
	}
	if t.count.Load() >= int64(t.cfg.MaxPolicies) && ns-t.lastPrune.Load() >= t.shortest {
		t.pruneLocked(ns)
	}
	if t.count.Load() >= int64(t.cfg.MaxPolicies) {
		t.droppedPolicies.Inc()
		return nil
	}
	p := &policyState{last: ns} // not idle before its first observation
	t.policies.Store(strings.Clone(name), p)
	t.count.Add(1)
	return p
}

// Tick forgets the policies observed last longer than the longest window
// before now (they count nothing in any window), says how many, and ends
// the others' slots that ended by now. Ending a slot merges its sketch up
// the windows (tens of µs): a node that calls Tick just after each
// shortest slot's end spares its checks that. Without Tick, checks end
// slots and the tracker prunes when a new policy finds it full.
func (t *Tracker) Tick(now time.Time) int {
	ns := now.UnixNano()
	t.mu.Lock()
	n := t.pruneLocked(ns)
	t.mu.Unlock()
	t.policies.Range(func(_, v any) bool {
		p := v.(*policyState)
		p.mu.Lock()
		for _, s := range p.kinds {
			if s != nil && ns >= s.liveEnd {
				s.advance(floorDiv(ns, s.levels[0].width))
			}
		}
		p.mu.Unlock()
		return true
	})
	return n
}

func (t *Tracker) pruneLocked(ns int64) int {
	t.lastPrune.Store(ns)
	n := 0
	t.policies.Range(func(k, v any) bool {
		p := v.(*policyState)
		p.mu.Lock()
		idle := p.last <= ns-t.longest
		p.dead = p.dead || idle
		p.mu.Unlock()
		if idle {
			t.policies.Delete(k)
			t.count.Add(-1)
			n++
		}
		return true
	})
	return n
}

// Policies are the ids of the tracked policies, sorted.
func (t *Tracker) Policies() []string {
	var out []string
	t.policies.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	slices.Sort(out)
	return out
}

// Top is the n keys of policy counted most by kind by over the window of
// length window ending at now, merged from the window's slots. An
// untracked policy gives an empty summary.
func (t *Tracker) Top(policy string, by Kind, window time.Duration, n int, now time.Time) (Summary, error) {
	wi, err := t.checkQuery(by, window, n)
	if err != nil {
		return Summary{}, err
	}
	parts := t.collect(policy, by, wi, now.UnixNano())
	return t.finish(policy, by, window, parts, n), nil
}

// Summaries is Top for every tracked policy (policy == "") or for one,
// leaving out those that counted nothing in the window: what a node
// answers an admin call with. To merge nodes' answers without losing
// accuracy, ask for n = K and cut the merge (Combine, then Summary.Top).
func (t *Tracker) Summaries(now time.Time, window time.Duration, by Kind, policy string, n int) ([]Summary, error) {
	wi, err := t.checkQuery(by, window, n)
	if err != nil {
		return nil, err
	}
	names := []string{policy}
	if policy == "" {
		names = t.Policies()
	}
	ns := now.UnixNano()
	var out []Summary
	for _, name := range names {
		if parts := t.collect(name, by, wi, ns); len(parts) > 0 {
			out = append(out, t.finish(name, by, window, parts, n))
		}
	}
	return out, nil
}

func (t *Tracker) checkQuery(by Kind, window time.Duration, n int) (int, error) {
	if by >= numKinds {
		return 0, fmt.Errorf("%w: by is %d, want hits or denied", ErrArgument, uint8(by))
	}
	if n < 1 {
		return 0, fmt.Errorf("%w: n is %d, want at least 1", ErrArgument, n)
	}
	for i, w := range t.cfg.Windows {
		if w.Length == window {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: window %s is not tracked (tracked: %v)", ErrArgument, window, t.Windows())
}

// collect takes the window's slot summaries under the policy's lock; the
// merge runs outside it, so a query does not hold up checks.
func (t *Tracker) collect(policy string, by Kind, wi int, ns int64) []Summary {
	v, ok := t.policies.Load(policy)
	if !ok {
		return nil
	}
	p := v.(*policyState)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.kinds[by] == nil {
		return nil
	}
	return p.kinds[by].collect(wi, ns, nil)
}

func (t *Tracker) finish(policy string, by Kind, window time.Duration, parts []Summary, n int) Summary {
	s := Merge(parts...)
	s.Policy, s.By, s.Window = policy, by, window
	if len(parts) == 0 {
		s.K = t.cfg.K
	}
	return s.Top(n)
}
