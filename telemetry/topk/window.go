package topk

import (
	"math"
	"sync"
)

// policyState is one policy's sketches. Its mutex guards everything in it
// and is the only lock an observation of a tracked policy takes, so
// policies never contend with each other.
type policyState struct {
	mu    sync.Mutex
	last  int64 // Unix ns of the latest observation, for pruning
	dead  bool  // pruned: an observer holding it must look the policy up again
	kinds [numKinds]*series
}

// series is one kind's windows of one policy, as a cascade: one live
// sketch counts the current slot of the shortest window; when that slot
// ends it is frozen, and merged into the slot of the next window that
// contains it, and so on up. So an observation updates one sketch, not
// one per window, and a longer window's slots are built from a shorter
// one's (their lengths divide, which Config checks).
type series struct {
	live    *Sketch
	liveIdx int64 // the slot live counts, in shortest slots since the epoch
	liveEnd int64 // Unix ns where live's slot ends
	levels  []level
}

// level is one window, shortest first.
type level struct {
	width int64 // ns per slot
	ratio int64 // width in shortest slots
	// acc is the part of this level's current slot that lower levels have
	// finished (level 0 has none: live is its current slot). The whole
	// current slot is live and the accs of this level and those below.
	acc  Summary
	past []slot // the Slots-1 slots before the current, at index mod len
}

type slot struct {
	idx int64
	sum Summary // immutable once frozen: queries use it without copying
}

func newSeries(ws []Window, k int) *series {
	s := &series{live: newSketch(k), liveIdx: math.MinInt64, liveEnd: math.MinInt64}
	s.levels = make([]level, len(ws))
	shortest := int64(ws[0].slot())
	for i, w := range ws {
		width := int64(w.slot())
		s.levels[i] = level{width: width, ratio: width / shortest, past: make([]slot, w.Slots-1)}
	}
	return s
}

func (s *series) add(kc *keyCopy, weight, ns int64) {
	// Time never goes back: an observation for an earlier slot counts in
	// the live one.
	if ns >= s.liveEnd {
		s.advance(floorDiv(ns, s.levels[0].width))
	}
	s.live.add(kc, weight)
}

// advance makes b the live slot. The slot that ends is frozen into level
// 0's ring and climbs: into the acc of each level whose slot goes on, or,
// where that slot ends too, with that acc into the level's ring and up.
func (s *series) advance(b int64) {
	a := s.liveIdx
	if a != math.MinInt64 && b <= a {
		return // only where liveEnd saturated, at the end of time
	}
	if a != math.MinInt64 {
		piece := s.live.snapshot()
		s.levels[0].push(a, piece)
		for j := 1; j < len(s.levels); j++ {
			lv := &s.levels[j]
			aj, bj := floorDiv(a, lv.ratio), floorDiv(b, lv.ratio)
			if aj == bj {
				lv.acc = mergePieces(lv.acc, piece)
				break
			}
			piece, lv.acc = mergePieces(lv.acc, piece), Summary{}
			lv.push(aj, piece)
		}
		s.live.Reset()
	}
	s.liveIdx = b
	s.liveEnd = satAdd(satMul(b, s.levels[0].width), s.levels[0].width)
}

// mergePieces merges two disjoint parts of one slot, skipping the merge
// (and its allocation) when either is empty.
func mergePieces(a, b Summary) Summary {
	switch {
	case b.N == 0:
		return a
	case a.N == 0:
		return b
	}
	return Merge(a, b)
}

func (lv *level) push(idx int64, sum Summary) {
	if sum.N > 0 && len(lv.past) > 0 {
		lv.past[mod(idx, int64(len(lv.past)))] = slot{idx: idx, sum: sum}
	}
}

// collect appends the pieces of window i ending in the slot of ns: that
// slot (live and the accs up to level i, if it is still current) and the
// Slots-1 before it.
func (s *series) collect(i int, ns int64, out []Summary) []Summary {
	lv := &s.levels[i]
	now := floorDiv(ns, lv.width)
	lo := now - int64(len(lv.past))
	if s.liveIdx != math.MinInt64 {
		if cur := floorDiv(s.liveIdx, lv.ratio); cur >= lo && cur <= now {
			if s.live.n > 0 {
				out = append(out, s.live.snapshot())
			}
			for j := 1; j <= i; j++ {
				if s.levels[j].acc.N > 0 {
					out = append(out, s.levels[j].acc)
				}
			}
		}
	}
	for _, p := range lv.past {
		if p.sum.N > 0 && p.idx >= lo && p.idx <= now {
			out = append(out, p.sum)
		}
	}
	return out
}

// floorDiv and mod round toward minus infinity, so that slots before the
// epoch are as wide as those after it.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func mod(a, n int64) int64 {
	r := a % n
	if r < 0 {
		r += n
	}
	return r
}

// satMul multiplies a slot index by a width, clamped: a time near the
// ends of int64 must not wrap into the past.
func satMul(a, b int64) int64 {
	if b != 0 && a != 0 && (a > math.MaxInt64/b || a < math.MinInt64/b) {
		if a > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return a * b
}
