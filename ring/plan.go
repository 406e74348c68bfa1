package ring

import "slices"

// Move replaces one replica of one shard: Add joins it (as a non-voter first,
// then a voter), then Remove leaves. Add may be "" (only when the shard has more
// replicas than it should) and Remove may be "" (a shard below its replication
// factor gains one).
type Move struct {
	Shard  int
	Add    string
	Remove string
}

// Plan returns the next moves that take placement toward Place over the
// active nodes, at most maxMoves, one per shard, never a shard in busy.
// placement[s] is shard s's current replicas (preferred leader first);
// active are the nodes that may hold replicas; everyone else named in
// placement (leaving or removed nodes) must lose its replicas. Deterministic.
//
// The target of shard s is Place(s, active, replicas), which is every active
// node when there are fewer than replicas. A shard with fewer replicas than
// its target gains one (Remove ""), a shard with more loses one (Add ""), and
// any other shard off its target swaps one: the heaviest target node it lacks
// joins, then a replica outside the target leaves, one on a non-active node
// first, else the lightest. Executed add-then-remove, no move takes a shard
// below min(replicas, len(active)) replicas, and each moves one step closer:
// a shard reaches its target in max(|missing|, |extra|) moves, none wasted.
//
// Moves come in priority order: first the shards with a replica on a
// non-active node whose replicas on active nodes number at most a majority
// of replicas (one more failure and the group may be lost), then the other
// shards with a replica on a non-active node, then the rest; ties by shard.
//
// Plan returns nil when replicas or maxMoves is not positive or active is
// empty: with no node to hold them, removing every replica is never right.
// The result depends on active only as a set; no argument is modified.
func Plan(placement [][]string, active []string, replicas, maxMoves int, busy map[int]bool) []Move {
	if replicas <= 0 || maxMoves <= 0 || len(active) == 0 {
		return nil
	}
	ids := distinct(active)
	isActive := make(map[string]bool, len(ids))
	for _, id := range ids {
		isActive[id] = true
	}
	majority := replicas/2 + 1

	// Classify every shard cheaply; the targets (a weight per active node)
	// are computed in priority order only until maxMoves are found.
	const atRisk, degraded, rest = 0, 1, 2
	var classes [3][]int
	for s, cur := range placement {
		if busy[s] {
			continue
		}
		live, gone := 0, 0
		for i, id := range cur {
			switch {
			case slices.Contains(cur[:i], id):
			case isActive[id]:
				live++
			default:
				gone++
			}
		}
		c := rest
		if gone > 0 {
			c = degraded
			if live <= majority {
				c = atRisk
			}
		}
		classes[c] = append(classes[c], s)
	}

	pl := planner{ids: ids, isActive: isActive, replicas: replicas, top: make([]candidate, 0, min(replicas, len(ids)))}
	var moves []Move
	for _, class := range classes {
		for _, s := range class {
			if m, ok := pl.shard(s, placement[s]); ok {
				moves = append(moves, m)
				if len(moves) == maxMoves {
					return moves
				}
			}
		}
	}
	return moves
}

// planner holds what every shard's plan shares, and a buffer for the target.
type planner struct {
	ids      []string // active, distinct and sorted
	isActive map[string]bool
	replicas int
	top      []candidate
}

// shard returns shard s's next move, or false if cur is its target.
func (pl *planner) shard(s int, cur []string) (Move, bool) {
	pl.top = heaviest(s, pl.ids, pl.replicas, pl.top)
	target := pl.top
	inTarget := func(id string) bool {
		return slices.ContainsFunc(target, func(c candidate) bool { return c.id == id })
	}
	m := Move{Shard: s}
	for _, c := range target { // heaviest first
		if !slices.Contains(cur, c.id) {
			m.Add = c.id
			break
		}
	}
	n := 0 // distinct replicas
	var lightest candidate
	lightestActive := false
	for i, id := range cur {
		if slices.Contains(cur[:i], id) {
			continue
		}
		n++
		if inTarget(id) {
			continue
		}
		c, a := candidate{weight(id, s), id}, pl.isActive[id]
		// Non-active first, then the lightest (ties as in Place).
		if m.Remove == "" || lightestActive && !a || a == lightestActive && heavier(lightest, c) {
			m.Remove, lightest, lightestActive = id, c, a
		}
	}
	switch {
	case n < len(target):
		m.Remove = "" // gain one; Add is set, as some target node is missing
	case n > len(target):
		m.Add = "" // lose one; Remove is set, as some replica is off target
	}
	// With n == len(target), Add and Remove are both set or both empty.
	return m, m.Add != "" || m.Remove != ""
}

// heaviest returns, in top's memory, the r heaviest of the distinct ids for
// shard, heaviest first: what place returns, by insertion into r slots
// rather than a sort of every id.
func heaviest(shard int, ids []string, r int, top []candidate) []candidate {
	top = top[:0]
	for _, id := range ids {
		c := candidate{weight(id, shard), id}
		if len(top) < r {
			top = append(top, c)
		} else if !heavier(c, top[r-1]) {
			continue
		}
		i := len(top) - 1
		for ; i > 0 && heavier(c, top[i-1]); i-- {
			top[i] = top[i-1]
		}
		top[i] = c
	}
	return top
}

// heavier reports whether a ranks above b in Place: a greater weight, or an
// equal weight and a smaller id.
func heavier(a, b candidate) bool {
	return a.weight > b.weight || a.weight == b.weight && a.id < b.id
}
