package topk

import (
	"cmp"
	"fmt"
	"slices"
)

// Merge combines summaries of disjoint streams of one policy and kind (the
// slots of a window, the nodes of a cluster) into one that keeps the
// package's guarantee for the union: counts add up, a key one summary lacks
// is counted at that summary's Min (as count and as error), and the K
// highest are kept, K being the largest of the inputs'. Policy, By and
// Window are the first summary's. Merge of nothing is the zero Summary.
//
// Merge never panics and never returns more than MaxK entries, whatever
// its inputs; its guarantee holds for inputs that pass Validate.
func Merge(summaries ...Summary) Summary {
	if len(summaries) == 0 {
		return Summary{}
	}
	first := summaries[0]
	out := Summary{Policy: first.Policy, By: first.By, Window: first.Window}
	var sumMin int64
	total := 0
	for _, s := range summaries {
		out.K = max(out.K, s.K)
		out.N = satAdd(out.N, s.N)
		sumMin = satAdd(sumMin, s.Min)
		total += len(s.Entries)
	}
	out.K = min(out.K, MaxK)
	cands := mergeCounts(summaries, total, sumMin)
	out.Entries, out.Min = keepTop(cands, out.K, sumMin)
	return out
}

// candidate is a key's merged estimate while merging. minIn is the sum of
// the Mins of the summaries that list it: the others' Mins still count.
type candidate struct {
	Entry
	minIn int64
}

func mergeCounts(summaries []Summary, total int, sumMin int64) []candidate {
	at := make(map[string]int, total)
	cands := make([]candidate, 0, total)
	for _, s := range summaries {
		for _, e := range s.Entries {
			i, ok := at[e.Key]
			if !ok {
				i = len(cands)
				at[e.Key] = i
				cands = append(cands, candidate{Entry: Entry{Key: e.Key}})
			}
			c := &cands[i]
			c.Count, c.Err = satAdd(c.Count, e.Count), satAdd(c.Err, e.Err)
			c.minIn = satAdd(c.minIn, s.Min)
		}
	}
	for i := range cands {
		c := &cands[i]
		missed := max(0, sumMin-c.minIn)
		c.Count, c.Err = satAdd(c.Count, missed), satAdd(c.Err, missed)
	}
	return cands
}

// keepTop keeps the k highest candidates; Min becomes the largest of the
// Mins' sum (a key no summary lists) and the highest count dropped.
func keepTop(cands []candidate, k int, sumMin int64) ([]Entry, int64) {
	es := make([]Entry, len(cands))
	for i, c := range cands {
		es[i] = c.Entry
	}
	sortEntries(es)
	floor := sumMin
	if len(es) > k {
		floor = max(floor, es[k].Count)
		es = es[:k:k]
	}
	return es, floor
}

// Combine merges the answers of several nodes, each a list of summaries,
// into one summary per policy and kind, ordered by policy then kind.
// Summaries of one policy and kind but of different windows are merged
// alike: callers ask every node the same question.
func Combine(answers ...[]Summary) []Summary {
	type group struct {
		policy string
		by     Kind
	}
	byGroup := map[group][]Summary{}
	var order []group
	for _, a := range answers {
		for _, s := range a {
			g := group{s.Policy, s.By}
			if _, ok := byGroup[g]; !ok {
				order = append(order, g)
			}
			byGroup[g] = append(byGroup[g], s)
		}
	}
	slices.SortFunc(order, func(a, b group) int {
		return cmp.Or(cmp.Compare(a.policy, b.policy), cmp.Compare(a.by, b.by))
	})
	out := make([]Summary, 0, len(order))
	for _, g := range order {
		out = append(out, Merge(byGroup[g]...))
	}
	return out
}

// Validate checks the invariants Merge relies on, naming the first field
// that breaks one (by its JSON name).
func (s Summary) Validate() error {
	switch {
	case len(s.Policy) > MaxPolicyLen:
		return summaryErr("policy is %d bytes, at most %d", len(s.Policy), MaxPolicyLen)
	case s.By >= numKinds:
		return summaryErr("by is %d, want hits or denied", uint8(s.By))
	case s.Window < 0:
		return summaryErr("window_ns is %d, negative", s.Window)
	case s.K < 0 || s.K > MaxK:
		return summaryErr("k is %d, want 0..%d", s.K, MaxK)
	case len(s.Entries) > s.K:
		return summaryErr("entries has %d, more than k (%d)", len(s.Entries), s.K)
	case s.N < 0:
		return summaryErr("n is %d, negative", s.N)
	case s.Min < 0 || s.Min > s.N:
		return summaryErr("min is %d, want 0..n (%d)", s.Min, s.N)
	}
	return s.validateEntries()
}

func (s Summary) validateEntries() error {
	seen := make(map[string]struct{}, len(s.Entries))
	var lower int64 // the true counts' lower bounds, of distinct keys
	for i, e := range s.Entries {
		switch {
		case len(e.Key) > MaxKeyLen:
			return summaryErr("entries[%d].key is %d bytes, at most %d", i, len(e.Key), MaxKeyLen)
		case e.Count < s.Min || e.Count > s.N:
			// A listed key counts at least Min: it beat every key dropped.
			return summaryErr("entries[%d].count is %d, want min..n (%d..%d)", i, e.Count, s.Min, s.N)
		case e.Err < 0 || e.Err > s.Min:
			return summaryErr("entries[%d].err is %d, want 0..min (%d)", i, e.Err, s.Min)
		}
		if _, dup := seen[e.Key]; dup {
			return summaryErr("entries[%d].key %q is listed twice", i, e.Key)
		}
		seen[e.Key] = struct{}{}
		lower = satAdd(lower, e.Count-e.Err)
	}
	if lower > s.N {
		return summaryErr("entries count at least %d, more than n (%d)", lower, s.N)
	}
	return nil
}

func summaryErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSummary}, args...)...)
}
