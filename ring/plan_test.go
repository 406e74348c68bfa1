package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// Over the nodes a..f, Place ranks them (heaviest first) as
//
//	shard 0: a d e c b f
//	shard 1: a b f e d c
//	shard 2: e a c f b d
//	shard 3: a f e b d c
//	shard 4: e d a c f b
//	shard 5: b e a f c d
//
// and over a subset as the restriction of that order. TestPlanFixture pins it,
// so the expectations below can be read off it.
var fixtureRanks = [][]string{
	{"a", "d", "e", "c", "b", "f"},
	{"a", "b", "f", "e", "d", "c"},
	{"e", "a", "c", "f", "b", "d"},
	{"a", "f", "e", "b", "d", "c"},
	{"e", "d", "a", "c", "f", "b"},
	{"b", "e", "a", "f", "c", "d"},
}

func TestPlanFixture(t *testing.T) {
	for s, want := range fixtureRanks {
		if got := Place(s, []string{"f", "e", "d", "c", "b", "a"}, 6); !slices.Equal(got, want) {
			t.Fatalf("shard %d ranks %v; the tests assume %v", s, got, want)
		}
	}
}

var aToE = []string{"a", "b", "c", "d", "e"}

// TestPlanShard checks the move chosen for one shard (shard 0, ranking
// a d e c b f; over a..e its target for R=3 is a d e).
func TestPlanShard(t *testing.T) {
	tests := []struct {
		name     string
		replicas []string // shard 0's
		active   []string
		r        int
		want     []Move
	}{
		{"at target", []string{"a", "d", "e"}, aToE, 3, nil},
		{"at target, leader order is not placement's business", []string{"e", "a", "d"}, aToE, 3, nil},
		{"below target gains the heaviest missing node, removes nothing", []string{"a"}, aToE, 3,
			[]Move{{0, "d", ""}}},
		{"no replicas at all gains the heaviest node", nil, aToE, 3, []Move{{0, "a", ""}}},
		// d is heavier than e, so it joins first; b is lighter than c, so it leaves first.
		{"swap: heaviest missing joins, lightest extra leaves", []string{"a", "b", "c"}, aToE, 3,
			[]Move{{0, "d", "b"}}},
		// c is heavier than b, but c is not active, so it leaves first.
		{"a non-active replica leaves before a lighter active one", []string{"a", "b", "c"},
			[]string{"a", "b", "d", "e", "f"}, 3, []Move{{0, "d", "c"}}},
		// Four replicas, target three: shrink first, without adding (the
		// swap of c for e comes next round, at three replicas).
		{"above target removes the lightest extra, adds nothing", []string{"a", "d", "c", "b"}, aToE, 3,
			[]Move{{0, "", "b"}}},
		{"above target removes a non-active replica first", []string{"a", "d", "e", "b", "c"},
			[]string{"a", "b", "d", "e"}, 3, []Move{{0, "", "c"}}},
		{"above target with nothing missing", []string{"a", "d", "e", "c"}, aToE, 3,
			[]Move{{0, "", "c"}}},
		// Only a and b remain active: the target is both, and c (leaving)
		// may go, as the floor is min(R, active) = 2.
		{"fewer active than replicas: the target is every active node", []string{"a", "b", "c"},
			[]string{"a", "b"}, 3, []Move{{0, "", "c"}}},
		{"fewer active than replicas, one missing", []string{"a"}, []string{"b", "a"}, 3,
			[]Move{{0, "b", ""}}},
		// A duplicate is one replica: {a, d} has two, so it gains e, and
		// {a, d, c} has three, so it swaps c for e rather than shrinking.
		{"duplicates count once", []string{"a", "a", "d"}, aToE, 3, []Move{{0, "e", ""}}},
		{"duplicates count once at the target size", []string{"a", "a", "d", "c"}, aToE, 3,
			[]Move{{0, "e", "c"}}},
		{"R=1 moves the single replica", []string{"d"}, aToE, 1, []Move{{0, "a", "d"}}},
		// Removing every replica is never a plan.
		{"no active nodes", []string{"a", "b", "c"}, nil, 3, nil},
		{"no replicas wanted", []string{"a", "b", "c"}, aToE, 0, nil},
		{"negative replicas", []string{"a", "b", "c"}, aToE, -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			placement := [][]string{slices.Clone(tt.replicas)}
			active := slices.Clone(tt.active)
			got := Plan(placement, active, tt.r, 5, nil)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Plan = %v; want %v", got, tt.want)
			}
			if !slices.Equal(placement[0], tt.replicas) || !slices.Equal(active, tt.active) {
				t.Errorf("Plan modified its input: %v, %v", placement, active)
			}
		})
	}
}

// TestPlanPriority: over a..e with R=3 the targets are
//
//	0: a d e   1: a b e   2: e a c   3: a e b   4: e d a
//
// and f is not active (leaving or removed).
func TestPlanPriority(t *testing.T) {
	placement := [][]string{
		{"a", "d", "c"},      // 0: all active, off target: last
		{"a", "b", "e", "f"}, // 1: f gone but 3 live, more than a majority (2): second
		{"e", "a", "f"},      // 2: f gone, 2 live: at a majority, at risk: first
		{"a", "e", "b"},      // 3: at target: no move
		{"e", "f"},           // 4: f gone, 1 live: at risk: first
	}
	var (
		m0 = Move{0, "e", "c"}
		m1 = Move{1, "", "f"} // four replicas: shrink
		m2 = Move{2, "c", "f"}
		m4 = Move{4, "d", ""} // two replicas: grow
	)
	// The shard ids run against the priority (the lowest id is the least
	// urgent), so shard order alone, or one class for both kinds of
	// degraded shards, gives a different answer.
	tests := []struct {
		name     string
		maxMoves int
		busy     map[int]bool
		want     []Move
	}{
		{"all, most urgent first", 10, nil, []Move{m2, m4, m1, m0}},
		{"exactly as many as needed", 4, nil, []Move{m2, m4, m1, m0}},
		{"the at-risk shards take the only slots", 2, nil, []Move{m2, m4}},
		{"then the degraded shard", 3, nil, []Move{m2, m4, m1}},
		{"one move", 1, nil, []Move{m2}},
		{"no moves", 0, nil, nil},
		{"negative moves", -1, nil, nil},
		// A busy shard has a move in progress: planning another would run
		// two configuration changes on one group at once.
		{"busy shards are skipped", 10, map[int]bool{2: true, 0: true}, []Move{m4, m1}},
		{"a busy shard frees its slot for the next", 2, map[int]bool{2: true}, []Move{m4, m1}},
		{"busy shards that need nothing change nothing", 10, map[int]bool{3: true, 7: true}, []Move{m2, m4, m1, m0}},
		{"all busy", 10, map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Plan(placement, aToE, 3, tt.maxMoves, tt.busy); !slices.Equal(got, tt.want) {
				t.Errorf("Plan = %v; want %v", got, tt.want)
			}
		})
	}
}

// TestPlanMajorityThreshold: a shard with a replica on a gone node (f) is at
// risk while its live replicas are at most a majority of R (R/2+1), and
// merely degraded above it. In each case the degraded shard has the lower id,
// so a wrong threshold puts it first.
func TestPlanMajorityThreshold(t *testing.T) {
	tests := []struct {
		name      string
		r         int
		placement [][]string
		want      []Move
	}{
		// Over a..e with R=5 the target is all of a..e. The threshold is
		// 3, not R-1 (4) or a fixed 2.
		{"R=5: 3 live is at risk, 4 is not", 5, [][]string{
			{"a", "b", "c", "d", "f"},
			{"a", "b", "c", "f"},
		}, []Move{{1, "e", ""}, {0, "e", "f"}}},
		// Targets a d e c and a b e d. A majority of 4 is 3, not 2 ((R+1)/2).
		{"R=4: 3 live is at risk, 4 is not", 4, [][]string{
			{"a", "d", "e", "c", "f"},
			{"a", "b", "e", "f"},
		}, []Move{{1, "d", "f"}, {0, "", "f"}}},
		// Targets a d e and a b e: shard 1's b is one live replica, not two.
		{"R=3: a duplicate is one live replica", 3, [][]string{
			{"a", "d", "e", "c", "f"},
			{"a", "b", "b", "f"},
		}, []Move{{1, "e", "f"}, {0, "", "f"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Plan(tt.placement, aToE, tt.r, 10, nil); !slices.Equal(got, tt.want) {
				t.Errorf("Plan = %v; want %v", got, tt.want)
			}
		})
	}
}

// TestPlanDeterministic: the moves depend on active only as a set.
func TestPlanDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 1))
	for trial := range 50 {
		old := randomIDs(rng, 3+rng.IntN(5))
		active := append(slices.Clone(old[1:]), randomIDs(rng, rng.IntN(3))...)
		placement := placementOver(64, old, 3)
		want := Plan(placement, active, 3, 1+rng.IntN(20), nil)
		if len(want) == 0 {
			t.Fatalf("trial %d: no moves from %v to %v", trial, old, active)
		}
		for range 5 {
			shuffled := slices.Clone(active)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			shuffled = append(shuffled, shuffled[:rng.IntN(len(shuffled))]...) // duplicates too
			if got := Plan(placement, shuffled, 3, len(want), nil); !slices.Equal(got, want) {
				t.Fatalf("trial %d: active %v gives %v; %v gave %v", trial, shuffled, got, active, want)
			}
		}
	}
}

// TestPlanConverges applies every returned move, add then remove, and plans
// again until Plan returns nothing. It checks that the placement ends at the
// target, that each shard takes exactly max(missing, extra) moves (none
// wasted), that the rounds are bounded, that every move is well formed, and
// that no intermediate placement has fewer than min(R, active) replicas.
func TestPlanConverges(t *testing.T) {
	scenarios := []struct {
		name string
		// from returns the nodes the placement starts on and the active nodes.
		from func(rng *rand.Rand) (old, active []string)
	}{
		{"grow 3 to 5", func(rng *rand.Rand) ([]string, []string) {
			old := randomIDs(rng, 3)
			return old, append(slices.Clone(old), randomIDs(rng, 2)...)
		}},
		{"shrink 5 to 3", func(rng *rand.Rand) ([]string, []string) {
			old := randomIDs(rng, 5)
			return old, pick(rng, old, 3)
		}},
		{"one node removed from 4", func(rng *rand.Rand) ([]string, []string) {
			old := randomIDs(rng, 4)
			return old, pick(rng, old, 3)
		}},
		{"join and leave at once", func(rng *rand.Rand) ([]string, []string) {
			old := randomIDs(rng, 4)
			return old, append(pick(rng, old, 3), randomIDs(rng, 1)...)
		}},
		{"replace two of 7", func(rng *rand.Rand) ([]string, []string) {
			old := randomIDs(rng, 7)
			return old, append(pick(rng, old, 5), randomIDs(rng, 2)...)
		}},
		{"shrink 3 to 2", func(rng *rand.Rand) ([]string, []string) {
			old := randomIDs(rng, 3)
			return old, pick(rng, old, 2)
		}},
		{"all new nodes", func(rng *rand.Rand) ([]string, []string) {
			return randomIDs(rng, 3), randomIDs(rng, 4)
		}},
	}
	rng := rand.New(rand.NewPCG(15, 2))
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for trial := range 20 {
				old, active := sc.from(rng)
				shards, r, maxMoves := 1+rng.IntN(200), 1+rng.IntN(3), 1+rng.IntN(16)
				placement := placementOver(shards, old, r)
				// Some shards start under-replicated, as after a failure.
				for s := range placement {
					if rng.IntN(8) == 0 {
						placement[s] = placement[s][:rng.IntN(len(placement[s])+1)]
					}
				}
				if err := converge(placement, active, r, maxMoves); err != nil {
					t.Fatalf("trial %d (%d shards, R=%d, max %d, %v -> %v): %v",
						trial, shards, r, maxMoves, old, active, err)
				}
			}
		})
	}
}

// converge runs Plan to its fixed point, checking as TestPlanConverges says.
func converge(placement [][]string, active []string, r, maxMoves int) error {
	floor := min(r, len(active))
	total, longest := 0, 0
	left := make([]int, len(placement)) // moves each shard should still take
	for s, cur := range placement {
		target := Place(s, active, r)
		missing, extra := 0, 0
		for _, id := range target {
			if !slices.Contains(cur, id) {
				missing++
			}
		}
		for _, id := range cur {
			if !slices.Contains(target, id) {
				extra++
			}
		}
		left[s] = max(missing, extra)
		total += left[s]
		longest = max(longest, left[s])
	}
	bound := (total+maxMoves-1)/maxMoves + longest
	for round := 0; ; round++ {
		moves := Plan(placement, active, r, maxMoves, nil)
		if len(moves) == 0 {
			break
		}
		if round == bound {
			return fmt.Errorf("still moving after %d rounds (%d moves, longest %d): %v", round, total, longest, moves)
		}
		if len(moves) > maxMoves {
			return fmt.Errorf("round %d: %d moves, more than %d", round, len(moves), maxMoves)
		}
		seen := map[int]bool{}
		for _, m := range moves {
			if seen[m.Shard] {
				return fmt.Errorf("round %d: two moves for shard %d: %v", round, m.Shard, moves)
			}
			seen[m.Shard] = true
			if err := apply(placement, m, Place(m.Shard, active, r), floor); err != nil {
				return fmt.Errorf("round %d: %v: %w", round, m, err)
			}
			if left[m.Shard]--; left[m.Shard] < 0 {
				return fmt.Errorf("round %d: %v: shard %d moved more than it needed", round, m, m.Shard)
			}
		}
	}
	for s, cur := range placement {
		if target := Place(s, active, r); !sameSet(cur, target) {
			return fmt.Errorf("shard %d ends on %v; want %v", s, cur, target)
		}
	}
	return nil
}

// apply executes m on placement add-then-remove, checking that it is well
// formed and keeps the shard at min(floor, its size before) replicas or more.
func apply(placement [][]string, m Move, target []string, floor int) error {
	cur := placement[m.Shard]
	least := min(floor, len(cur))
	switch {
	case m.Add == "" && m.Remove == "":
		return fmt.Errorf("empty move")
	case m.Add != "" && (slices.Contains(cur, m.Add) || !slices.Contains(target, m.Add)):
		return fmt.Errorf("adds %q to %v, target %v", m.Add, cur, target)
	case m.Remove != "" && (!slices.Contains(cur, m.Remove) || slices.Contains(target, m.Remove)):
		return fmt.Errorf("removes %q from %v, target %v", m.Remove, cur, target)
	}
	if m.Add != "" {
		cur = append(cur, m.Add)
	}
	if len(cur) < least {
		return fmt.Errorf("%v: %d replicas after the add, fewer than %d", cur, len(cur), least)
	}
	if m.Remove != "" {
		cur = slices.DeleteFunc(cur, func(id string) bool { return id == m.Remove })
	}
	if len(cur) < least {
		return fmt.Errorf("%v: %d replicas after the remove, fewer than %d", cur, len(cur), least)
	}
	placement[m.Shard] = cur
	return nil
}

// TestPlanGrowMovesToTheNewNode: growing N to N+1 nodes only copies replicas
// to the new node, and about R/(N+1) of them.
func TestPlanGrowMovesToTheNewNode(t *testing.T) {
	const shards, r, added = 1024, 3, "node-new"
	for _, n := range []int{3, 5, 9} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			nodes := nodeIDs(n)
			placement := placementOver(shards, nodes, r)
			active := append(slices.Clone(nodes), added)
			moved := 0
			for {
				moves := Plan(placement, active, r, 64, nil)
				if len(moves) == 0 {
					break
				}
				for _, m := range moves {
					// Every shard has R replicas, so a move is a swap.
					if m.Add != added || m.Remove == "" {
						t.Fatalf("%v; want node-new to replace a replica", m)
					}
					if err := apply(placement, m, Place(m.Shard, active, r), r); err != nil {
						t.Fatalf("%v: %v", m, err)
					}
					moved++
				}
			}
			expected := float64(shards*r) / float64(n+1)
			if float64(moved) < 0.7*expected || float64(moved) > 1.3*expected {
				t.Errorf("%d moves; want about %.0f (within 30%%)", moved, expected)
			}
		})
	}
}

// TestPlanTargetIsPlace: Plan's target, by selection, is Place's, by sort.
func TestPlanTargetIsPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 3))
	var top []candidate
	for range 200 {
		ids := distinct(randomIDs(rng, 1+rng.IntN(40)))
		r, shard := 1+rng.IntN(8), rng.IntN(1<<20)
		top = heaviest(shard, ids, r, top)
		got := make([]string, len(top))
		for i, c := range top {
			got[i] = c.id
		}
		if want := Place(shard, ids, r); !slices.Equal(got, want) {
			t.Fatalf("shard %d, R=%d over %v: %v; Place says %v", shard, r, ids, got, want)
		}
	}
}

// TestHeavier: equal weights rank the smaller id higher, as Place breaks
// ties (64-bit weights practically never tie, so only this test sees it).
func TestHeavier(t *testing.T) {
	tests := []struct {
		a, b candidate
		want bool
	}{
		{candidate{2, "b"}, candidate{1, "a"}, true},
		{candidate{1, "a"}, candidate{2, "b"}, false},
		{candidate{1, "a"}, candidate{1, "b"}, true},
		{candidate{1, "b"}, candidate{1, "a"}, false},
		{candidate{1, "a"}, candidate{1, "a"}, false},
	}
	for _, tt := range tests {
		if got := heavier(tt.a, tt.b); got != tt.want {
			t.Errorf("heavier(%v, %v) = %v; want %v", tt.a, tt.b, got, tt.want)
		}
	}
	top := heaviest(0, []string{"a", "b", "c"}, 2, nil)
	if len(top) != 2 || !heavier(top[0], top[1]) {
		t.Errorf("heaviest = %v; want two, heaviest first", top)
	}
}

func BenchmarkPlan(b *testing.B) {
	const shards, n, r, maxMoves = 4096, 100, 3, 16
	nodes := nodeIDs(n)
	for _, bc := range []struct {
		name   string
		active []string
	}{
		// Every shard's target is computed and none needs a move: the
		// cost of a planning tick in a settled cluster.
		{"steady", nodes},
		// The first maxMoves shards that need the new node end the search.
		{"join", append(slices.Clone(nodes), "node-new")},
		// The shards on the failed node come first.
		{"failure", nodes[1:]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			placement := placementOver(shards, nodes, r)
			b.ReportAllocs()
			for b.Loop() {
				Plan(placement, bc.active, r, maxMoves, nil)
			}
		})
	}
}

// placementOver is Place for shards 0..shards-1 as Plan takes it.
func placementOver(shards int, nodes []string, r int) [][]string {
	p := make([][]string, shards)
	for s := range p {
		p[s] = Place(s, nodes, r)
	}
	return p
}

func randomIDs(rng *rand.Rand, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%08x", rng.Uint32())
	}
	return ids
}

// pick returns n of ids at random.
func pick(rng *rand.Rand, ids []string, n int) []string {
	out := slices.Clone(ids)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:n]
}

func sameSet(a, b []string) bool {
	return slices.Equal(distinct(a), distinct(b))
}
