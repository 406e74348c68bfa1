package topk

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Sketch is a space-saving sketch of k counters over a stream of weighted
// keys. It is not safe for concurrent use; a Tracker guards its own.
type Sketch struct {
	k int
	n int64 // total weight added

	index    map[string]int32 // key -> its counter
	counters []counter        // at most k; never reordered, so index stays valid
	heap     []int32          // counters by count, a min-heap: heap[0] is evicted
}

type counter struct {
	key   string
	count int64
	err   int64 // the count the key inherited when it took the counter
	pos   int32 // index in heap
}

// NewSketch returns a sketch of k counters, 1 <= k <= MaxK.
func NewSketch(k int) (*Sketch, error) {
	if k < 1 || k > MaxK {
		return nil, fmt.Errorf("%w: k is %d, want 1..%d", ErrArgument, k, MaxK)
	}
	return newSketch(k), nil
}

func newSketch(k int) *Sketch {
	// The map and slices grow with the keys seen: a policy with one key
	// costs one counter, not k.
	return &Sketch{k: k, index: make(map[string]int32)}
}

// K is the number of counters.
func (s *Sketch) K() int { return s.k }

// N is the total weight added since the sketch was made or reset.
func (s *Sketch) N() int64 { return s.n }

// Add counts key with weight w; w <= 0 is ignored. The sketch keeps its
// own copy of a key it starts counting.
func (s *Sketch) Add(key string, w int64) {
	kc := keyCopy{src: key}
	s.add(&kc, w)
}

// keyCopy clones the observed key at most once per observation, however
// many sketches start counting it, so that no sketch retains the caller's
// memory and a key already counted costs no allocation.
type keyCopy struct {
	src    string
	cloned bool
}

func (c *keyCopy) get() string {
	if !c.cloned {
		c.src, c.cloned = strings.Clone(c.src), true
	}
	return c.src
}

func (s *Sketch) add(kc *keyCopy, w int64) {
	if w <= 0 {
		return
	}
	s.n = satAdd(s.n, w)
	if i, ok := s.index[kc.src]; ok {
		c := &s.counters[i]
		c.count = satAdd(c.count, w)
		s.down(int(c.pos))
		return
	}
	if len(s.counters) < s.k {
		s.insert(kc.get(), w)
		return
	}
	// Full: the key takes the smallest counter and its count, which bounds
	// how much of the inherited count is not the key's own.
	i := s.heap[0]
	c := &s.counters[i]
	delete(s.index, c.key)
	c.key, c.err, c.count = kc.get(), c.count, satAdd(c.count, w)
	s.index[c.key] = i
	s.down(0)
}

func (s *Sketch) insert(key string, w int64) {
	i := int32(len(s.counters))
	s.counters = append(s.counters, counter{key: key, count: w, pos: int32(len(s.heap))})
	s.heap = append(s.heap, i)
	s.index[key] = i
	s.up(len(s.heap) - 1)
}

// Reset empties the sketch, keeping its memory.
func (s *Sketch) Reset() {
	clear(s.index)
	clear(s.counters) // drop the keys for the collector
	s.counters, s.heap, s.n = s.counters[:0], s.heap[:0], 0
}

// Summary is the sketch's content, by count, highest first.
func (s *Sketch) Summary() Summary {
	sum := s.snapshot()
	sortEntries(sum.Entries)
	return sum
}

// snapshot is Summary unsorted, cheap enough to take under a lock.
func (s *Sketch) snapshot() Summary {
	sum := Summary{K: s.k, N: s.n, Entries: make([]Entry, len(s.counters))}
	for i, c := range s.counters {
		sum.Entries[i] = Entry{Key: c.key, Count: c.count, Err: c.err}
	}
	if len(s.counters) == s.k {
		// Only a full sketch has evicted: a key it does not list may have
		// been counted up to the smallest counter.
		sum.Min = s.counters[s.heap[0]].count
	}
	return sum
}

func (s *Sketch) less(a, b int) bool {
	return s.counters[s.heap[a]].count < s.counters[s.heap[b]].count
}

func (s *Sketch) swap(a, b int) {
	h := s.heap
	h[a], h[b] = h[b], h[a]
	s.counters[h[a]].pos = int32(a)
	s.counters[h[b]].pos = int32(b)
}

func (s *Sketch) up(j int) {
	for j > 0 {
		p := (j - 1) / 2
		if !s.less(j, p) {
			return
		}
		s.swap(j, p)
		j = p
	}
}

func (s *Sketch) down(j int) {
	n := len(s.heap)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && s.less(r, l) {
			m = r
		}
		if !s.less(m, j) {
			return
		}
		s.swap(j, m)
		j = m
	}
}

// sortEntries orders by count, highest first; ties by the tighter error,
// then by key, so that every node ranks equal summaries alike.
func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		switch {
		case a.Count != b.Count:
			return cmpDesc(a.Count, b.Count)
		case a.Err != b.Err:
			return -cmpDesc(a.Err, b.Err)
		}
		return strings.Compare(a.Key, b.Key)
	})
}

func cmpDesc(a, b int64) int {
	if a > b {
		return -1
	}
	if a < b {
		return 1
	}
	return 0
}

// satAdd adds without wrapping: counts from the network may be huge, and a
// wrapped sum would turn the largest count into the smallest.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}
