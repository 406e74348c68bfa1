package ring

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func nodeIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("node-%d", i+1)
	}
	return ids
}

func TestPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tests := []struct {
		name     string
		nodes    []string
		replicas int
		want     int // result length
	}{
		{"three of five", nodeIDs(5), 3, 3},
		{"leader only", nodeIDs(5), 1, 1},
		{"more replicas than nodes", nodeIDs(2), 3, 2},
		{"duplicates ignored", []string{"b", "a", "b", "a", "c"}, 5, 3},
		{"zero replicas", nodeIDs(5), 0, 0},
		{"negative replicas", nodeIDs(5), -1, 0},
		{"nil nodes", nil, 3, 0},
		{"empty nodes", []string{}, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for shard := range 32 {
				input := slices.Clone(tt.nodes)
				got := Place(shard, input, tt.replicas)
				if !slices.Equal(input, tt.nodes) {
					t.Fatalf("Place modified its input: %v", input)
				}
				if len(got) != tt.want {
					t.Fatalf("shard %d: Place = %v; want %d replicas", shard, got, tt.want)
				}
				if len(distinct(got)) != len(got) {
					t.Fatalf("shard %d: duplicate replica in %v", shard, got)
				}
				for i, id := range got {
					if !slices.Contains(tt.nodes, id) {
						t.Fatalf("shard %d: %q is not an input node", shard, id)
					}
					if i > 0 && weight(got[i-1], shard) < weight(id, shard) {
						t.Fatalf("shard %d: %v not heaviest first", shard, got)
					}
				}
				// Fewer replicas is a prefix: shrinking R never reorders.
				if tt.replicas > 1 && !slices.Equal(Place(shard, tt.nodes, tt.replicas-1), got[:min(tt.replicas-1, len(got))]) {
					t.Fatalf("shard %d: R-1 placement is not a prefix of %v", shard, got)
				}
				for range 5 {
					rng.Shuffle(len(input), func(i, j int) { input[i], input[j] = input[j], input[i] })
					if again := Place(shard, input, tt.replicas); !slices.Equal(again, got) {
						t.Fatalf("shard %d: order %v gives %v; want %v", shard, input, again, got)
					}
				}
			}
		})
	}
}

// TestPlaceSpread checks that leaders and replicas spread evenly over nodes.
// With 1024 shards and n nodes a node's count is binomial; ±25% of the mean is
// about 4-6 standard deviations, so the bound fails only for a biased weight.
func TestPlaceSpread(t *testing.T) {
	const shards = 1024
	for _, tt := range []struct{ nodes, replicas int }{{5, 1}, {5, 3}, {3, 2}, {9, 3}} {
		t.Run(fmt.Sprintf("n=%d,R=%d", tt.nodes, tt.replicas), func(t *testing.T) {
			leads, holds := map[string]int{}, map[string]int{}
			for _, ids := range PlaceAll(shards, nodeIDs(tt.nodes), tt.replicas) {
				leads[ids[0]]++
				for _, id := range ids {
					holds[id]++
				}
			}
			for _, c := range []struct {
				what   string
				counts map[string]int
				mean   float64
			}{
				{"leads", leads, float64(shards) / float64(tt.nodes)},
				{"holds", holds, float64(shards*tt.replicas) / float64(tt.nodes)},
			} {
				for _, id := range nodeIDs(tt.nodes) {
					if n := float64(c.counts[id]); n < 0.75*c.mean || n > 1.25*c.mean {
						t.Errorf("%s %s %v shards; want %.0f ± 25%%", id, c.what, n, c.mean)
					}
				}
			}
		})
	}
}

func TestMovesAddNode(t *testing.T) {
	const shards, added = 1024, "node-new"
	for _, tt := range []struct{ nodes, replicas int }{{5, 3}, {3, 3}, {5, 1}, {9, 3}} {
		t.Run(fmt.Sprintf("n=%d,R=%d", tt.nodes, tt.replicas), func(t *testing.T) {
			nodes := nodeIDs(tt.nodes)
			before := PlaceAll(shards, nodes, tt.replicas)
			after := PlaceAll(shards, append(nodes, added), tt.replicas)
			for s := range shards {
				old, cur := before[s], after[s]
				// Either nothing changed, or the new node took a slot and
				// the old lightest replica fell off; the rest keep their order.
				want := old
				if i := slices.Index(cur, added); i >= 0 {
					want = slices.Insert(slices.Clone(old[:len(old)-1]), i, added)
				}
				if !slices.Equal(cur, want) {
					t.Fatalf("shard %d: %v -> %v; want %v", s, old, cur, want)
				}
			}
			expected := float64(shards*tt.replicas) / float64(tt.nodes+1)
			if got := float64(Moves(before, after)); got < 0.7*expected || got > 1.3*expected {
				t.Errorf("Moves = %v; want about %.0f (within 30%%)", got, expected)
			}
		})
	}
}

func TestMovesRemoveNode(t *testing.T) {
	const shards = 1024
	for _, tt := range []struct{ nodes, replicas int }{{6, 3}, {4, 3}, {6, 1}} {
		t.Run(fmt.Sprintf("n=%d,R=%d", tt.nodes, tt.replicas), func(t *testing.T) {
			nodes := nodeIDs(tt.nodes)
			removed := nodes[1]
			before := PlaceAll(shards, nodes, tt.replicas)
			after := PlaceAll(shards, slices.Delete(slices.Clone(nodes), 1, 2), tt.replicas)
			held := 0
			for s := range shards {
				old, cur := before[s], after[s]
				// Shards without the removed node keep their replicas; the
				// others lose it and gain exactly one node, appended last.
				want := old
				if i := slices.Index(old, removed); i >= 0 {
					held++
					want = slices.Delete(slices.Clone(old), i, i+1)
					if len(cur) != len(old) || !slices.Equal(cur[:len(want)], want) || slices.Contains(old, cur[len(want)]) {
						t.Fatalf("shard %d: %v -> %v; want %v plus one new node", s, old, cur, want)
					}
					continue
				}
				if !slices.Equal(cur, want) {
					t.Fatalf("shard %d: %v -> %v; want unchanged", s, old, cur)
				}
			}
			if got := Moves(before, after); got != held {
				t.Errorf("Moves = %d; want %d, the replicas the removed node held", got, held)
			}
		})
	}
}

func TestMoves(t *testing.T) {
	tests := []struct {
		name          string
		before, after Placement
		want          int
	}{
		{"both empty", nil, nil, 0},
		{"unchanged", Placement{0: {"a", "b"}}, Placement{0: {"a", "b"}}, 0},
		{"leader change is free", Placement{0: {"a", "b"}}, Placement{0: {"b", "a"}}, 0},
		{"dropped replica is free", Placement{0: {"a", "b"}}, Placement{0: {"a"}}, 0},
		{"replacement", Placement{0: {"a", "b"}}, Placement{0: {"a", "c"}}, 1},
		{"new shard copies all", Placement{0: {"a"}}, Placement{0: {"a"}, 1: {"a", "b"}}, 2},
		{"from nothing", nil, Placement{0: {"a", "b"}, 1: {"c"}}, 3},
	}
	for _, tt := range tests {
		if got := Moves(tt.before, tt.after); got != tt.want {
			t.Errorf("%s: Moves = %d; want %d", tt.name, got, tt.want)
		}
	}
}

func TestPlaceAllEmpty(t *testing.T) {
	for _, p := range []Placement{PlaceAll(0, nodeIDs(3), 3), PlaceAll(-1, nodeIDs(3), 3), PlaceAll(4, nil, 3), PlaceAll(4, nodeIDs(3), 0)} {
		for s, ids := range p {
			if len(ids) != 0 {
				t.Errorf("shard %d placed on %v; want nothing", s, ids)
			}
		}
	}
}
