package tenants

import (
	"container/heap"
	"slices"
	"strings"
)

// Page returns up to limit assignments with ids after after, in id order,
// only those on plan unless plan is "", and whether more follow. It reads
// the whole table once and holds limit+1 assignments.
func (t *Table) Page(after string, limit int, plan string) ([]Assignment, bool) {
	if limit <= 0 {
		return nil, false
	}
	h := &maxHeap{}
	t.Range(func(id, p string) bool {
		if id <= after || plan != "" && p != plan {
			return true
		}
		if h.Len() <= limit {
			heap.Push(h, Assignment{id, p})
		} else if id < (*h)[0].TenantID {
			(*h)[0] = Assignment{id, p}
			heap.Fix(h, 0)
		}
		return true
	})
	out := []Assignment(*h)
	slices.SortFunc(out, func(a, b Assignment) int { return strings.Compare(a.TenantID, b.TenantID) })
	if len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// maxHeap keeps the smallest ids seen, the largest of them on top.
type maxHeap []Assignment

func (h maxHeap) Len() int           { return len(h) }
func (h maxHeap) Less(i, j int) bool { return h[i].TenantID > h[j].TenantID }
func (h maxHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *maxHeap) Push(x any)        { *h = append(*h, x.(Assignment)) }
func (h *maxHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
