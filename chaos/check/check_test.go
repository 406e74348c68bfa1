package check

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// t0 is a fixed instant; times in the tables are offsets from it.
const t0 = int64(1_767_225_600_000_000_000) // 2026-01-01T00:00:00Z

const ms = int64(time.Millisecond)

// limit2 holds 2 tokens and refills one per 10ms.
var limit2 = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1, Period: 10 * time.Millisecond, Burst: 2}

// limit1 holds 1 token and refills one per 10ms.
var limit1 = fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 1, Period: 10 * time.Millisecond}

// op builds an operation: wall window [call, ret] and decision time at, in ms
// after t0; idx is the Raft index.
func op(client int, call, ret int64, cost int64, out Outcome, at int64, idx uint64) Operation {
	o := Operation{Client: client, Call: t0 + call*ms, Return: t0 + ret*ms, Cost: cost, Outcome: out, Index: idx}
	if out != Unknown {
		o.DecidedAt = t0 + at*ms
	}
	return o
}

// onShard puts o's decision in shard's log.
func onShard(o Operation, shard int) Operation {
	o.Shard = shard
	return o
}

func TestHandMade(t *testing.T) {
	tests := []struct {
		name         string
		limit        fsm.Limit
		ops          []Operation
		linearizable bool
		admissible   bool // CheckAdmission(...).OK()
	}{
		{
			name:  "sequential",
			limit: limit2,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(0, 1, 2, 1, Allowed, 1, 2),
				op(0, 2, 3, 1, Denied, 2, 3),     // empty
				op(0, 11, 12, 1, Allowed, 11, 4), // one refilled at 10ms after the first take
				op(0, 12, 13, 1, Denied, 12, 5),
				op(0, 40, 41, 2, Allowed, 40, 6), // full again
			},
			linearizable: true, admissible: true,
		},
		{
			name:  "a split moves the key to a new shard, whose log starts again",
			limit: limit2,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 900),
				op(0, 1, 2, 1, Allowed, 1, 901),
				onShard(op(0, 2, 3, 1, Denied, 2, 4), 5), // the child's state: still empty
				onShard(op(0, 11, 12, 1, Allowed, 11, 5), 5),
			},
			linearizable: true, admissible: true,
		},
		{
			name:  "back to the shard that gave the key away",
			limit: limit2,
			ops: []Operation{
				onShard(op(0, 0, 1, 1, Allowed, 0, 4), 5),
				op(0, 1, 2, 1, Allowed, 1, 902),
			},
			linearizable: false, admissible: true,
		},
		{
			name:  "concurrent in the order of decision, not of call",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 10, 1, Denied, 6, 2),
				op(1, 1, 9, 1, Allowed, 5, 1),
			},
			linearizable: true, admissible: true,
		},
		{
			name:  "three allows at one instant, capacity 2",
			limit: limit2,
			ops: []Operation{
				op(0, 0, 2, 1, Allowed, 1, 1),
				op(1, 0, 2, 1, Allowed, 1, 1),
				op(2, 0, 2, 1, Allowed, 1, 1),
			},
			linearizable: false, admissible: false,
		},
		{
			name:  "allow before refill",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(0, 5, 6, 1, Allowed, 9, 2), // 9ms < 10ms: still empty
			},
			linearizable: false, admissible: false,
		},
		{
			// B is denied at 5ms; C, called after B returned, is allowed at
			// 3ms: time went backwards, and at 3ms the bucket was empty.
			name:  "allow returned after a deny decided later",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(1, 2, 6, 1, Denied, 5, 3),
				op(2, 7, 8, 1, Allowed, 3, 2),
			},
			linearizable: false, admissible: false,
		},
		{
			// Every window is within the rate, but the third op, called after
			// the second returned, was decided earlier: a stale decision.
			name:  "decision time travels back",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(1, 2, 21, 1, Allowed, 20, 2),
				op(2, 22, 23, 1, Allowed, 10, 3),
			},
			linearizable: false, admissible: true,
		},
		{
			name:  "log index travels back",
			limit: limit2,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 5),
				op(1, 2, 3, 1, Allowed, 0, 4),
			},
			linearizable: false, admissible: true,
		},
		{
			name:  "deny with a full bucket",
			limit: limit2,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(0, 30, 31, 2, Denied, 30, 2),
			},
			linearizable: false, admissible: true,
		},
		{
			// The deny at 15ms finds a token unless the unknown op took it.
			name:  "unknown op must have happened",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(1, 2, 3, 1, Unknown, 0, 0),
				op(0, 14, 16, 1, Denied, 15, 3),
			},
			linearizable: true, admissible: true,
		},
		{
			name:  "same without the unknown op",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(0, 14, 16, 1, Denied, 15, 3),
			},
			linearizable: false, admissible: true,
		},
		{
			// The allows at 10ms and 20ms need every token: the unknown op
			// cannot have happened before them.
			name:  "unknown op must not have happened",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(1, 2, 3, 1, Unknown, 0, 0),
				op(0, 9, 11, 1, Allowed, 10, 2),
				op(0, 19, 21, 1, Allowed, 20, 3),
			},
			linearizable: true, admissible: true,
		},
		{
			// Only one token has refilled by 10ms, so an unknown op of cost 2
			// cannot have taken it and explain the deny.
			name:  "unknown op cannot take what has not refilled",
			limit: limit2,
			ops: []Operation{
				op(0, 0, 1, 2, Allowed, 0, 1),
				op(1, 2, 3, 2, Unknown, 0, 0),
				op(0, 9, 11, 1, Denied, 10, 2),
			},
			linearizable: false, admissible: true,
		},
		{
			// The bucket is full from 10ms. The unknown op took its token at
			// some τ in (15ms, 25ms], re-anchoring the refill there, so the
			// deny at 25ms found 0 tokens and one refilled by 30ms.
			name:  "unknown op took from a full bucket",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(1, 2, 3, 1, Unknown, 0, 0),
				op(0, 24, 26, 1, Denied, 25, 2),
				op(0, 29, 31, 1, Allowed, 30, 3),
				op(0, 33, 35, 1, Denied, 34, 4),
			},
			linearizable: true, admissible: true,
		},
		{
			// As above, but the deny needs τ > 15ms and the allow at the
			// same instant τ <= 15ms.
			name:  "unknown op cannot both leave and not leave a token",
			limit: limit1,
			ops: []Operation{
				op(0, 0, 1, 1, Allowed, 0, 1),
				op(1, 2, 3, 1, Unknown, 0, 0),
				op(0, 24, 26, 1, Denied, 25, 2),
				op(0, 24, 26, 1, Allowed, 25, 3),
			},
			linearizable: false, admissible: true,
		},
		{
			// Before any known op the bucket is full; an unknown op then
			// does not stop two allows.
			name:  "unknown op first",
			limit: limit2,
			ops: []Operation{
				op(1, 0, 1, 2, Unknown, 0, 0),
				op(0, 2, 3, 1, Allowed, 2, 1),
				op(0, 2, 3, 1, Allowed, 2, 1),
			},
			linearizable: true, admissible: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, info := CheckLinearizable(tt.limit, tt.ops)
			if ok != tt.linearizable {
				t.Errorf("CheckLinearizable = %v, want %v", ok, tt.linearizable)
			}
			if !ok {
				path := filepath.Join(t.TempDir(), "history.html")
				if err := Visualize(tt.limit, info, path); err != nil {
					t.Fatal(err)
				}
				if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "<html") {
					t.Errorf("visualization: %v, %d bytes", err, len(b))
				}
			}
			r := CheckAdmission(tt.limit, tt.ops)
			if r.OK() != tt.admissible {
				t.Errorf("CheckAdmission = %v, want ok=%v", r, tt.admissible)
			}
		})
	}
}

func TestAdmissionReport(t *testing.T) {
	ops := []Operation{
		op(0, 0, 2, 1, Allowed, 1, 1),
		op(1, 0, 2, 1, Allowed, 1, 1),
		op(2, 0, 2, 1, Allowed, 1, 1),
		op(3, 0, 2, 1, Allowed, 1, 1),
		op(0, 3, 4, 1, Unknown, 0, 0),
		op(0, 60, 61, 1, Denied, 60, 2), // the bucket is full again
	}
	r := CheckAdmission(limit2, ops)
	want := Report{
		Allowed: 4, Denied: 1, Unknown: 1, AllowedCost: 4,
		OverAdmitted: 2, MaxExcess: 2,
		Worst:            Interval{From: t0 + ms, To: t0 + ms, Admitted: 4, Bound: 2},
		ReferenceAllowed: 3, UnderAdmitted: 0, DeniedWithTokens: 1,
	}
	if r != want {
		t.Errorf("got  %v\nwant %v", r, want)
	}

	// Under-admission: everything denied.
	ops = []Operation{
		op(0, 0, 1, 1, Denied, 0, 1),
		op(0, 1, 2, 1, Denied, 1, 2),
		op(0, 20, 21, 1, Denied, 20, 3),
	}
	r = CheckAdmission(limit2, ops)
	if !r.OK() || r.ReferenceAllowed != 3 || r.UnderAdmitted != 3 || r.DeniedWithTokens != 3 {
		t.Errorf("all denied: %v", r)
	}
}

// genHistory applies n takes to a real fsm.Machine at increasing times and
// returns the history clients would have seen: wall windows around each
// decision, overlapping between clients, and a fraction of outcomes lost.
func genHistory(rng *rand.Rand, l fsm.Limit, n int, lost float64) []Operation {
	m := fsm.New(fsm.Config{})
	now := t0
	ops := make([]Operation, n)
	for i := range ops {
		if rng.IntN(4) > 0 { // a quarter of the ops share the previous instant
			now += rng.Int64N(15 * ms)
		}
		cost := 1 + rng.Int64N(2)
		r := m.Take(time.Unix(0, now), "k", l, cost)
		out := Denied
		if r.Allowed {
			out = Allowed
		}
		o := Operation{
			Client: i % 8, Cost: cost, Outcome: out, DecidedAt: m.Now(), Index: uint64(i + 1),
			Call: now - rng.Int64N(30*ms), Return: now + 1 + rng.Int64N(30*ms),
		}
		if rng.Float64() < lost {
			o.Outcome, o.DecidedAt, o.Index = Unknown, 0, 0
		}
		ops[i] = o
	}
	return ops
}

func TestRandomFromMachine(t *testing.T) {
	l := fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 7, Period: 100 * time.Millisecond, Burst: 3}
	flipped := 0
	for seed := uint64(1); seed <= 30; seed++ {
		lost := 0.0
		if seed%2 == 0 {
			lost = 0.05
		}
		rng := rand.New(rand.NewPCG(seed, 42))
		ops := genHistory(rng, l, 150, lost)
		if ok, _ := CheckLinearizable(l, ops); !ok {
			t.Fatalf("seed %d: history from fsm.Machine not linearizable", seed)
		}
		r := CheckAdmission(l, ops)
		if !r.OK() {
			t.Fatalf("seed %d: %v", seed, r)
		}
		if lost == 0 && (r.UnderAdmitted != 0 || r.DeniedWithTokens != 0 || r.ReferenceAllowed != r.AllowedCost) {
			t.Fatalf("seed %d: the reference bucket disagrees with fsm: %v", seed, r)
		}

		// Flip a DENY into an ALLOW. Pick one decided before any lost op
		// really consumed: an unknown op that did not happen could otherwise
		// have left the token the flipped op needs. (Picking one before any
		// lost op at all also keeps porcupine's search for a linearization,
		// which must fail, short.)
		firstLost := len(ops)
		for i := range ops {
			if ops[i].Outcome == Unknown {
				firstLost = i
				break
			}
		}
		var denies []int
		for i := range ops[:firstLost] {
			if ops[i].Outcome == Denied {
				denies = append(denies, i)
			}
		}
		if len(denies) == 0 {
			continue
		}
		i := denies[rng.IntN(len(denies))]
		bad := append([]Operation(nil), ops...)
		bad[i].Outcome = Allowed
		if ok, _ := CheckLinearizable(l, bad); ok {
			t.Fatalf("seed %d: flipping op %d (%v) to allow went unnoticed", seed, i, ops[i])
		}
		flipped++
	}
	if flipped < 20 {
		t.Errorf("only %d histories had a deny to flip", flipped)
	}
}

func TestRecorder(t *testing.T) {
	var r Recorder
	at := time.Unix(0, t0)
	a := r.Invoke(0, 1, at)
	b := r.Invoke(1, 2, at.Add(time.Millisecond))
	r.Complete(b, at.Add(3*time.Millisecond), Unknown, 99, 7, 2)
	r.Complete(a, at.Add(2*time.Millisecond), Allowed, t0+ms, 1, 2)
	c := r.Invoke(2, 1, at.Add(4*time.Millisecond))
	h := r.History()
	want := []Operation{
		{Client: 0, Call: t0, Return: t0 + 2*ms, Cost: 1, Outcome: Allowed, DecidedAt: t0 + ms, Index: 1, Shard: 2},
		{Client: 1, Call: t0 + ms, Return: t0 + 3*ms, Cost: 2, Outcome: Unknown},
		{Client: 2, Call: t0 + 4*ms, Cost: 1, Outcome: Unknown},
	}
	if c != 2 || len(h) != len(want) {
		t.Fatalf("id %d, history %v", c, h)
	}
	for i := range want {
		if h[i] != want[i] {
			t.Errorf("op %d = %v, want %v", i, h[i], want[i])
		}
	}
}
