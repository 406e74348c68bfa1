package decide

import (
	"math"
	"sync"
	"time"
)

// riskMemory remembers subjects' risk scores for the policies with
// risk.memory: a node's memory, not the cluster's (a subject whose
// requests go to several nodes is remembered by each that saw a high
// score). Bounded: when full, the weakest of a few entries is forgotten.
type riskMemory struct {
	mu  sync.Mutex
	m   map[string]memo
	max int
	obs Observer
}

type memo struct {
	score float64
	at    time.Time
}

// Bounds of the risk memory.
const (
	DefaultRiskMemory = 100_000
	// forgetBelow: a remembered score decayed below this no longer cuts
	// any band worth having and is dropped.
	forgetBelow = 0.01
	// evictSample entries are looked at to pick the one to forget.
	evictSample = 8
)

func newRiskMemory(max int, obs Observer) *riskMemory {
	return &riskMemory{m: map[string]memo{}, max: max, obs: obs}
}

// learner remembers what it recalls; lookup (for dry runs and explain)
// only reads.
type learner struct{ *riskMemory }
type lookup struct{ *riskMemory }

func (l learner) Recall(subject string, score float64, has bool, halfLife time.Duration, now time.Time) (float64, bool) {
	return l.recall(subject, score, has, halfLife, now, true)
}

func (l lookup) Recall(subject string, score float64, has bool, halfLife time.Duration, now time.Time) (float64, bool) {
	return l.recall(subject, score, has, halfLife, now, false)
}

func (r *riskMemory) recall(subject string, score float64, has bool, halfLife time.Duration, now time.Time, learn bool) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.m[subject]
	var kept float64
	if ok {
		kept = decayed(m, halfLife, now)
		if kept < forgetBelow {
			if learn {
				delete(r.m, subject)
			}
			ok, kept = false, 0
		}
	}
	if !has || score < kept {
		return kept, ok
	}
	if learn && score >= forgetBelow {
		r.remember(subject, memo{score: score, at: now}, halfLife)
	}
	return score, true
}

// decayed is m's score halved for every halfLife since it was kept; a
// clock that went back counts as no time.
func decayed(m memo, halfLife time.Duration, now time.Time) float64 {
	d := max(now.Sub(m.at), 0)
	return m.score * math.Exp2(-d.Seconds()/halfLife.Seconds())
}

func (r *riskMemory) remember(subject string, m memo, halfLife time.Duration) {
	if _, ok := r.m[subject]; !ok && len(r.m) >= r.max {
		r.evict(halfLife, m.at)
	}
	r.m[subject] = m
}

// evict forgets the weakest of a few entries (map order is random).
func (r *riskMemory) evict(halfLife time.Duration, now time.Time) {
	victim, weakest, n := "", math.Inf(1), 0
	for k, m := range r.m {
		if s := decayed(m, halfLife, now); s < weakest {
			victim, weakest = k, s
		}
		if n++; n == evictSample {
			break
		}
	}
	delete(r.m, victim)
	r.obs.RiskForgotten()
}

func (r *riskMemory) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
