package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// scopedCommand is randomCommand over scoped keys ("name NUL key", as the
// cluster keys buckets), with credits on those scopes, renewals and trims
// that name recent leases, and refunds that name decision times: every
// piece of state a restore must bring back changes some later result.
func scopedCommand(r *rand.Rand, now int64, leases []uint64) *Command {
	cmd := &Command{Now: now}
	scopes := []string{"a", "b"}
	for range r.IntN(6) {
		// Each key has its own limit, as a policy gives, so that state
		// carries from one command to the next; now and then it changes.
		si, k := r.IntN(len(scopes)), r.IntN(4)
		i := int64(si*4 + k)
		l := Limit{Algorithm: Algorithm(1 + i%int64(numAlgorithms-1)), Limit: 16 * (3 + i), Period: time.Duration(1+i%3) * 200 * time.Millisecond, Burst: i % 4}
		if r.IntN(10) == 0 {
			l.Limit, l.Period = 1+r.Int64N(12), time.Duration(1+r.Int64N(5))*100*time.Millisecond
		}
		scope := scopes[si]
		op := Op{Kind: OpKind(1 + r.IntN(int(numOps)-1)), Key: fmt.Sprint(scope, "\x00k", k), Limit: l, Cost: r.Int64N(l.Capacity() + 1), Group: uint32(r.IntN(3))}
		lease := uint64(r.IntN(4))
		if len(leases) > 0 && r.IntN(2) == 0 {
			lease = leases[r.IntN(len(leases))]
		}
		switch op.Kind {
		case OpTake:
			if r.IntN(4) == 0 {
				op.IdempotencyKey = fmt.Sprint("i", r.IntN(3))
			}
		case OpRefund:
			op.At = now - r.Int64N(int64(time.Second))
		case OpGrant, OpCredit:
			op.Holder, op.TTL = fmt.Sprint("n", r.IntN(3)), time.Duration(1+r.IntN(30))*100*time.Millisecond
			if op.Kind == OpCredit {
				op.Key = scope
			} else if r.IntN(2) == 0 {
				op.Lease, op.Held = lease, r.Int64N(4)
			}
		case OpReturn:
			op.Lease, op.Held = lease, r.Int64N(3)
		}
		cmd.Ops = append(cmd.Ops, op)
	}
	return cmd
}

// TestRestoreBeforeEveryCommand: a machine restored from its own snapshot
// before every command must decide exactly as one that never restored,
// for long random sequences over every algorithm, leases, credits and
// scoped keys. A restore that drops any field (a sliding window's previous
// count, the shaper's queue table, a lease's scope, a log's counts, ...)
// makes some later result differ.
func TestRestoreBeforeEveryCommand(t *testing.T) {
	for seed := range raceScaled(12) {
		r := rand.New(rand.NewPCG(seed, 23))
		plain, restored := New(Config{}), New(Config{})
		var leases []uint64
		for i, now := range randomTimes(r, 800, 250*time.Millisecond) {
			cmd := scopedCommand(r, now, leases)
			fresh := New(Config{})
			if err := fresh.Restore(bytes.NewReader(snapshotBytes(t, restored))); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			restored = fresh
			before := snapshotBytes(t, restored)
			a, b := plain.Apply(cmd, nil), restored.Apply(cmd, nil)
			where := fmt.Sprint("seed ", seed, " step ", i)
			checkFilters(t, before, cmd, a, where)
			checkFilters(t, before, cmd, b, where)
			checkIndex(t, restored, where)
			if decided(a) != decided(b) {
				t.Fatalf("seed %d step %d: the restored machine decided differently\ncommand %+v\nnever restored: %v\nrestored:       %v", seed, i, cmd.Ops, a, b)
			}
			for _, res := range a {
				if res.Lease != 0 {
					leases = append(leases[max(0, len(leases)-7):], res.Lease)
				}
			}
		}
		if !bytes.Equal(snapshotBytes(t, plain), snapshotBytes(t, restored)) {
			t.Fatalf("seed %d: final snapshots differ", seed)
		}
	}
}
