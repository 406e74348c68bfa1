package accuracy

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

// TestAgreesWithStateMachine feeds random arrivals to quorate's state
// machine, one command per arrival at its time, and hands its decisions to
// the accountant: an exact limiter must find them exact. The reference is
// written independently of fsm, so this checks both against each other.
func TestAgreesWithStateMachine(t *testing.T) {
	algs := []struct {
		name string
		alg  fsm.Algorithm
	}{
		{"token_bucket", fsm.TokenBucket},
		{"leaky_bucket_policing", fsm.LeakyPolicing},
		{"gcra", fsm.GCRA}, // exact when Period/Limit is whole nanoseconds, as here
		{"sliding_window", fsm.SlidingWindow},
		{"fixed_window", fsm.FixedWindow},
		{"sliding_log", fsm.SlidingLog},
	}
	epoch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
	for _, a := range algs {
		t.Run(a.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(a.alg)))
			var denied int64
			for trial := range 50 {
				limit := int64(1 + rng.IntN(20))
				period := time.Duration(limit) * time.Duration(1+rng.IntN(50)) * time.Millisecond
				burst := int64(rng.IntN(int(limit) + 5))
				if a.alg == fsm.LeakyPolicing || a.alg == fsm.GCRA {
					burst = max(burst, 1)
				}
				fl := fsm.Limit{Algorithm: a.alg, Limit: limit, Period: period, Burst: burst}
				m := fsm.New(fsm.Config{})
				now := epoch + rng.Int64N(int64(period))
				var as []Arrival
				for range 300 {
					now += rng.Int64N(int64(period) / 4)
					key := "k" + string(rune('a'+rng.IntN(3)))
					cost := int64(1)
					if rng.IntN(4) == 0 {
						cost = 1 + rng.Int64N(3)
					}
					res := m.Apply(&fsm.Command{Now: now, Ops: []fsm.Op{{Kind: fsm.OpTake, Key: key, Limit: fl, Cost: cost}}}, nil)
					as = append(as, Arrival{Bucket: uint64(key[1]), At: now, Cost: cost, Admitted: res[0].Allowed})
				}
				f, _ := FamilyOf(a.name)
				r, err := Account(Limit{Family: f, Limit: limit, Period: period, Burst: burst}, as)
				if err != nil {
					t.Fatal(err)
				}
				if r.OverAdmitted != 0 || r.UnderAdmitted != 0 || r.Admitted != r.AllowedByLimit {
					t.Fatalf("trial %d, %d per %v burst %d: %+v; want an exact match", trial, limit, period, burst, r)
				}
				denied += r.Checks - r.Admitted
			}
			if denied == 0 {
				t.Fatal("no arrival was denied: the comparison proved nothing")
			}
		})
	}
}

// TestAgreesWithCrossShardRefunds plays quorate's protocol for requests of
// several items on several shards: each shard decides its items at the
// request's time; if any item is denied, the items other shards allowed are
// refunded by a compensating command and reported refunded. With the refund
// applied at once (before any other request reaches the bucket), the bucket
// ends as if the request had never touched it, so the accountant, which
// leaves refunded checks out, must agree exactly.
//
// A refund that lands later is not the same as no charge: a token bucket
// refilled meanwhile below its capacity and then gets the full charge back,
// and a window that has rolled over gets the old window's charge taken off
// the new one. The accountant reports that as over-admission, as it is.
func TestAgreesWithCrossShardRefunds(t *testing.T) {
	for _, alg := range []struct {
		name string
		alg  fsm.Algorithm
	}{{"token_bucket", fsm.TokenBucket}, {"sliding_window", fsm.SlidingWindow}, {"fixed_window", fsm.FixedWindow}} {
		t.Run(alg.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2, uint64(alg.alg)))
			period := 100 * time.Millisecond
			fl := fsm.Limit{Algorithm: alg.alg, Limit: 5, Period: period}
			shards := []*fsm.Machine{fsm.New(fsm.Config{}), fsm.New(fsm.Config{}), fsm.New(fsm.Config{})}
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano()
			var as []Arrival
			var refunded, over int64
			// Refunds in flight, applied in time order between requests:
			// meanwhile their charge is still in the bucket.
			type refund struct {
				at         int64
				shard, key int
			}
			var pending []refund
			settle := func(upTo int64) {
				slices.SortFunc(pending, func(a, b refund) int { return cmp.Compare(a.at, b.at) })
				for len(pending) > 0 && pending[0].at <= upTo {
					p := pending[0]
					shards[p.shard].Apply(&fsm.Command{Now: p.at, Ops: []fsm.Op{{Kind: fsm.OpRefund, Key: fmt.Sprint(p.key), Limit: fl, Cost: 1}}}, nil)
					pending = pending[1:]
				}
			}
			for range 2000 {
				now += rng.Int64N(int64(period) / 20)
				settle(now)
				// Three distinct keys of 12, one per shard by key number.
				keys := rng.Perm(12)[:3]
				type decided struct {
					shard, key int
					allowed    bool
				}
				var ds []decided
				denied := false
				for _, k := range keys {
					s := k % 3
					res := shards[s].Apply(&fsm.Command{Now: now, Ops: []fsm.Op{{Kind: fsm.OpTake, Key: fmt.Sprint(k), Limit: fl, Cost: 1}}}, nil)
					ds = append(ds, decided{s, k, res[0].Allowed})
					denied = denied || !res[0].Allowed
				}
				refundAt := now
				for _, d := range ds {
					a := Arrival{Bucket: uint64(d.key), At: now, Cost: 1, Admitted: d.allowed && !denied}
					if denied && d.allowed {
						pending = append(pending, refund{refundAt, d.shard, d.key})
						a.Refunded = true
						refunded++
					}
					as = append(as, a)
				}
			}
			f, _ := FamilyOf(alg.name)
			r, err := Account(Limit{Family: f, Limit: 5, Period: period}, as)
			if err != nil {
				t.Fatal(err)
			}
			over += r.OverAdmitted
			if over != 0 || r.UnderAdmitted != 0 || r.Admitted != r.AllowedByLimit {
				t.Errorf("%+v: immediate refunds leave the buckets as if never charged; want an exact match", r)
			}
			if refunded == 0 || r.Admitted == 0 {
				t.Fatalf("refunded %d, admitted %d: the case proved nothing", refunded, r.Admitted)
			}
		})
	}
}
