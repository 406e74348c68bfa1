package fsm

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/quorate/quorate/fsm/exact"
)

// event is one admission (or, negative, a credit back) seen by a property test.
type event struct {
	at int64
	n  int64
}

// randomTimes yields n non-decreasing instants from t0 with gaps that are
// often zero (same batch), often small, sometimes a whole period.
func randomTimes(r *rand.Rand, n int, period time.Duration) []int64 {
	ts := make([]int64, n)
	now := t0
	for i := range ts {
		switch r.IntN(4) {
		case 0: // same instant
		case 1:
			now += r.Int64N(int64(period) / 20)
		case 2:
			now += r.Int64N(int64(period) / 3)
		default:
			now += r.Int64N(int64(period) * 2)
		}
		ts[i] = now
	}
	return ts
}

// checkRateBound asserts that over every interval [s, t] the net units
// admitted are at most capacity + limit*(t-s)/period.
func checkRateBound(t *testing.T, seed uint64, events []event, l Limit) {
	t.Helper()
	for i := range events {
		var sum int64
		for j := i; j < len(events); j++ {
			sum += events[j].n
			bound := l.Capacity() + exact.MulDiv(events[j].at-events[i].at, l.Limit, int64(l.Period))
			if sum > bound {
				t.Fatalf("seed %d: %s admitted %d in [%d, %d] (%s), bound %d",
					seed, l.Algorithm, sum, i, j, time.Duration(events[j].at-events[i].at), bound)
			}
		}
	}
}

func TestPropertyRateBound(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, LeakyPolicing} {
		for seed := range uint64(40) {
			r := rand.New(rand.NewPCG(seed, uint64(alg)))
			l := Limit{Algorithm: alg, Limit: 1 + r.Int64N(20), Period: time.Duration(1+r.Int64N(3000)) * time.Millisecond, Burst: r.Int64N(10)}
			m := New(Config{MaxClockJump: time.Hour})
			var events []event
			for _, now := range randomTimes(r, 300, l.Period) {
				cost := r.Int64N(l.Capacity() + 1)
				op := Op{Kind: OpTake, Key: "k", Limit: l, Cost: cost}
				if r.IntN(6) == 0 {
					op.Kind = OpRefund
				}
				// A peek first, so a refund's real credit is known.
				peek := Op{Kind: OpPeek, Key: "k", Limit: l}
				rs := m.Apply(&Command{Now: now, Ops: []Op{peek, op}}, nil)
				res := rs[1]
				switch {
				case res.Err != nil:
					t.Fatalf("seed %d: %v", seed, res.Err)
				case op.Kind == OpRefund:
					// Count what a refund credits as negative admission.
					events = append(events, event{now, rs[0].Remaining - res.Remaining})
				case res.Allowed:
					events = append(events, event{now, cost})
				}
			}
			checkRateBound(t, seed, events, l)
		}
	}
}

func TestPropertyLeasesNeverExceedBound(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, LeakyPolicing} {
		for seed := range uint64(40) {
			r := rand.New(rand.NewPCG(seed, 100+uint64(alg)))
			l := Limit{Algorithm: alg, Limit: 1 + r.Int64N(50), Period: time.Duration(10+r.Int64N(2000)) * time.Millisecond, Burst: r.Int64N(30)}
			m := New(Config{MaxClockJump: time.Hour, MaxLeaseTTL: time.Hour})
			var events []event
			live := map[uint64]int64{} // lease -> granted
			for _, now := range randomTimes(r, 300, l.Period) {
				op := Op{Kind: OpTake, Key: "k", Limit: l, Cost: r.Int64N(l.Capacity() + 1)}
				switch r.IntN(3) {
				case 0:
					op.Kind, op.Holder, op.TTL = OpGrant, fmt.Sprint("n", r.IntN(3)), time.Duration(1+r.Int64N(int64(2*l.Period)))
				case 1:
					for id, g := range live {
						op = Op{Kind: OpReturn, Lease: id, Cost: r.Int64N(g + 2)}
						break
					}
				}
				res := m.Apply(&Command{Now: now, Ops: []Op{op}}, nil)[0]
				if res.Err != nil {
					t.Fatalf("seed %d: %v", seed, res.Err)
				}
				switch {
				case op.Kind == OpGrant && res.Allowed:
					live[res.Lease] = res.Granted
					events = append(events, event{now, res.Granted})
				case op.Kind == OpReturn:
					// An honest holder hands back at most what it was
					// granted; count only that, whatever the op claimed.
					// An expired lease may have been spent in full: no credit.
					if res.Allowed {
						events = append(events, event{now, -min(op.Cost, live[op.Lease])})
					}
					if res.Granted > live[op.Lease] {
						t.Fatalf("seed %d: return credited %d of a %d lease", seed, res.Granted, live[op.Lease])
					}
					delete(live, op.Lease)
				case op.Kind == OpTake && res.Allowed:
					events = append(events, event{now, op.Cost})
				}
			}
			checkRateBound(t, seed, events, l)
		}
	}
}

// TestPropertyCreditsNeverExceedBound: a credit lets its holder admit
// CreditAllowance units on every bucket its filter leaves out, at any time
// until it expires. With each credit's allowance admitted at a random
// instant of its life (its first, its last, or any), together with the
// takes, the key never admits more than a token bucket allows over any
// interval: the cap of clearAt holds a live credit's allowance back from
// every bucket of its scope until it has refilled.
func TestPropertyCreditsNeverExceedBound(t *testing.T) {
	h := hashOf("k")
	for _, alg := range []Algorithm{TokenBucket, GCRA, LeakyPolicing} {
		charged := 0
		for seed := range raceScaled(1000) {
			r := rand.New(rand.NewPCG(seed, 200+uint64(alg)))
			l := Limit{Algorithm: alg, Limit: 1 + r.Int64N(400), Period: time.Duration(100+r.Int64N(3000)) * time.Millisecond, Burst: r.Int64N(400)}
			m := New(Config{MaxClockJump: time.Hour, MaxLeaseTTL: time.Hour})
			var events []event
			for _, now := range randomTimes(r, 400, min(l.Period, 2*time.Second)) {
				op := Op{Kind: OpTake, Key: "k", Limit: l, Cost: r.Int64N(l.Capacity() + 1)}
				ops := []Op{op}
				switch r.IntN(4) {
				case 0:
					op = Op{Kind: OpCredit, Holder: fmt.Sprint("n", r.IntN(3)), TTL: time.Duration(1+r.Int64N(int64(20*time.Second))) * time.Nanosecond}
					ops[0] = op
				case 1:
					// Grouped with a take that is often denied: then k's
					// take is refunded, and must leave no trace.
					ops[0].Group = 1
					ops = append(ops, Op{Kind: OpTake, Key: "other", Limit: l, Cost: r.Int64N(l.Capacity() + 1), Group: 1})
				}
				res := m.Apply(&Command{Now: now, Ops: ops}, nil)[0]
				switch {
				case res.Err != nil:
					t.Fatalf("seed %d: %v", seed, res.Err)
				case op.Kind == OpCredit && res.Allowed && !res.Filter.MayContain(h):
					at := now
					switch r.IntN(3) {
					case 0:
						at = res.Expires
					case 1:
						at += r.Int64N(res.Expires - now + 1)
					}
					events = append(events, event{at, CreditAllowance(l)})
					charged++
				case op.Kind == OpTake && res.Allowed && !res.Refunded:
					events = append(events, event{now, op.Cost})
				}
			}
			slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
			checkRateBound(t, seed, events, l)
		}
		if charged < 100 {
			t.Fatalf("%s: only %d credits charged the key: the test proves little", alg, charged)
		}
	}
}

func hashOf(k string) uint64 { return xxhash.Sum64String(k) }

func TestPropertySlidingLogExact(t *testing.T) {
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 7))
		l := Limit{Algorithm: SlidingLog, Limit: 1 + r.Int64N(20), Period: time.Duration(1+r.Int64N(2000)) * time.Millisecond}
		m := New(Config{MaxClockJump: time.Hour})
		var events []event
		for _, now := range randomTimes(r, 400, l.Period) {
			cost := r.Int64N(l.Limit + 1)
			if res := m.Apply(&Command{Now: now, Ops: []Op{{Kind: OpTake, Key: "k", Limit: l, Cost: cost}}}, nil)[0]; res.Allowed && cost > 0 {
				events = append(events, event{now, cost})
			}
		}
		// Every window (t-W, t] ending at an admission holds at most Limit.
		for j := range events {
			var sum int64
			for i := j; i >= 0 && events[i].at > events[j].at-int64(l.Period); i-- {
				sum += events[i].n
			}
			if sum > l.Limit {
				t.Fatalf("seed %d: %d admitted in a window of %s, limit %d", seed, sum, l.Period, l.Limit)
			}
		}
	}
}

func TestPropertyWindowsPerAlignedWindow(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		for seed := range uint64(40) {
			r := rand.New(rand.NewPCG(seed, 9))
			l := Limit{Algorithm: alg, Limit: 1 + r.Int64N(20), Period: time.Duration(1+r.Int64N(2000)) * time.Millisecond}
			m := New(Config{MaxClockJump: time.Hour})
			counts := map[int64]int64{}
			var prevTotal int64
			for _, now := range randomTimes(r, 400, l.Period) {
				cost := r.Int64N(l.Limit + 1)
				res := m.Apply(&Command{Now: now, Ops: []Op{{Kind: OpTake, Key: "k", Limit: l, Cost: cost}}}, nil)[0]
				if res.Allowed {
					counts[now/int64(l.Period)] += cost
				}
				prevTotal += cost
			}
			for w, c := range counts {
				if c > l.Limit {
					t.Fatalf("seed %d: %s admitted %d in window %d, limit %d", seed, alg, c, w, l.Limit)
				}
			}
			if prevTotal > 0 && len(counts) == 0 {
				t.Fatalf("seed %d: %s admitted nothing", seed, alg)
			}
		}
	}
}

// randomCommand makes a command mixing every algorithm and op over a few keys.
func randomCommand(r *rand.Rand, now int64) *Command {
	cmd := &Command{Now: now}
	for range r.IntN(6) {
		alg := Algorithm(1 + r.IntN(int(numAlgorithms)-1))
		l := Limit{Algorithm: alg, Limit: 1 + r.Int64N(10), Period: time.Duration(1+r.Int64N(5)) * 100 * time.Millisecond, Burst: r.Int64N(5)}
		op := Op{Kind: OpKind(1 + r.IntN(int(numOps)-1)), Key: fmt.Sprint("k", r.IntN(8)), Limit: l, Cost: r.Int64N(l.Capacity() + 1), Group: uint32(r.IntN(3))}
		switch op.Kind {
		case OpTake:
			if r.IntN(3) == 0 {
				op.IdempotencyKey = fmt.Sprint("i", r.IntN(5))
			}
		case OpGrant, OpCredit:
			op.Holder, op.TTL = fmt.Sprint("n", r.IntN(3)), time.Duration(1+r.IntN(30))*100*time.Millisecond
			if op.Kind == OpCredit {
				op.Key = "" // the scope of the keys above
			}
		case OpReturn:
			op.Lease = uint64(r.IntN(20))
		}
		cmd.Ops = append(cmd.Ops, op)
	}
	return cmd
}

func snapshotBytes(t *testing.T, m *Machine) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := m.Snapshot(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDeterminism feeds the same commands to two machines. Their sweepers
// visit maps in different random orders, yet results and snapshot bytes
// must be identical.
func TestDeterminism(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 11))
		a, b := New(Config{}), New(Config{})
		for i, now := range randomTimes(r, 500, 300*time.Millisecond) {
			cmd := randomCommand(r, now)
			before := snapshotBytes(t, b)
			ra, rb := a.Apply(cmd, nil), b.Apply(cmd, nil)
			checkFilters(t, before, cmd, ra, fmt.Sprint("seed ", seed, " step ", i))
			checkFilters(t, before, cmd, rb, fmt.Sprint("seed ", seed, " step ", i))
			if decided(ra) != decided(rb) {
				t.Fatalf("seed %d step %d: results differ:\n%v\n%v", seed, i, ra, rb)
			}
			if i%50 == 0 && !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, b)) {
				t.Fatalf("seed %d step %d: snapshots differ", seed, i)
			}
		}
	}
}

// TestSnapshotContinue: snapshot, restore into a new machine, continue; the
// results must match a machine that never snapshotted.
func TestSnapshotContinue(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 17))
		times := randomTimes(r, 600, 300*time.Millisecond)
		a := New(Config{})
		b := New(Config{})
		for i, now := range times {
			cmd := randomCommand(r, now)
			if i > 0 && i%97 == 0 {
				fresh := New(Config{})
				if err := fresh.Restore(bytes.NewReader(snapshotBytes(t, b))); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				b = fresh
			}
			before := snapshotBytes(t, b)
			ra, rb := a.Apply(cmd, nil), b.Apply(cmd, nil)
			checkFilters(t, before, cmd, ra, fmt.Sprint("seed ", seed, " step ", i))
			checkFilters(t, before, cmd, rb, fmt.Sprint("seed ", seed, " step ", i))
			if decided(ra) != decided(rb) {
				t.Fatalf("seed %d step %d: restored machine diverged:\n%v\n%v", seed, i, ra, rb)
			}
		}
		if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, b)) {
			t.Fatalf("seed %d: final snapshots differ", seed)
		}
	}
}

func TestRestoreRejectsDamage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	src := New(Config{})
	for _, now := range randomTimes(r, 200, 300*time.Millisecond) {
		src.Apply(randomCommand(r, now), nil)
	}
	good := snapshotBytes(t, src)
	dst := New(Config{})
	dst.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpTake, Key: "x", Limit: Limit{Algorithm: TokenBucket, Limit: 5, Period: time.Hour}, Cost: 3}}}, nil)
	before := snapshotBytes(t, dst)
	cases := map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)/2],
		"no crc":    good[:len(good)-4],
		"flipped":   flip(good, len(good)/3),
		"magic":     flip(good, 0),
		"version":   flip(good, 4),
	}
	for name, b := range cases {
		if err := dst.Restore(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: Restore accepted a damaged snapshot", name)
		}
		if !bytes.Equal(before, snapshotBytes(t, dst)) {
			t.Fatalf("%s: a failed Restore changed the machine", name)
		}
	}
	if err := dst.Restore(bytes.NewReader(good)); err != nil {
		t.Fatalf("good snapshot: %v", err)
	}
	if !bytes.Equal(good, snapshotBytes(t, dst)) {
		t.Fatal("restored machine snapshots differently")
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}

func TestCodecRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m := New(Config{})
	for _, now := range randomTimes(r, 300, 300*time.Millisecond) {
		cmd := randomCommand(r, now)
		got, err := DecodeCommand(AppendCommand(nil, cmd))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", cmd) {
			t.Fatalf("command round trip:\n%+v\n%+v", cmd, got)
		}
		rs := m.Apply(cmd, nil)
		back, err := DecodeResults(AppendResults(nil, rs))
		if err != nil {
			t.Fatal(err)
		}
		for i := range rs {
			if rs[i].Err != nil { // errors travel as their sentinel
				rs[i].Err = codeError(errorCode(rs[i].Err))
			}
		}
		if fmt.Sprintf("%+v", back) != fmt.Sprintf("%+v", rs) && len(rs) > 0 {
			t.Fatalf("results round trip:\n%+v\n%+v", rs, back)
		}
	}
	if _, err := DecodeCommand([]byte{9}); err == nil {
		t.Fatal("unknown version accepted")
	}
	if _, err := DecodeCommand(append(AppendCommand(nil, &Command{Now: 1}), 0)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
}
