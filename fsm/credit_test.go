package fsm

import (
	"fmt"
	"testing"
	"time"
)

// TestRefundToFreshLevel: a bucket that comes into being through a take
// that is then refunded (its group was denied) is absent again, not a
// bucket kept at capacity − deficit that refills the deficit before the
// key's first admission. So the key's first admissions plus the live
// credit's allowance stay within capacity.
func TestRefundToFreshLevel(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		l := Limit{Algorithm: alg, Limit: 16, Period: time.Second, Burst: 128}
		huge := Limit{Algorithm: TokenBucket, Limit: 1, Period: time.Hour}
		m := New(Config{})
		if r := m.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpCredit, Holder: "n1", TTL: 20 * time.Second}}}, nil)[0]; !r.Allowed {
			t.Fatalf("%s: credit refused: %+v", alg, r)
		}
		rs := m.Apply(&Command{Now: t0 + int64(time.Millisecond), Ops: []Op{
			{Kind: OpTake, Key: "k", Limit: l, Cost: 1, Group: 1},
			{Kind: OpTake, Key: "big", Limit: huge, Cost: 2, Group: 1},
		}}, nil)
		if !rs[0].Refunded {
			t.Fatalf("%s: the grouped take was not refunded: %+v", alg, rs)
		}
		at := t0 + int64(500*time.Millisecond)
		admitted := CreditAllowance(l) // the credit's holder spends it all
		for m.Apply(&Command{Now: at, Ops: []Op{{Kind: OpTake, Key: "k", Limit: l, Cost: 1}}}, nil)[0].Allowed {
			admitted++
		}
		if admitted > l.Capacity() {
			t.Errorf("%s: %d admitted at the key's first instant of admission, capacity %d", alg, admitted, l.Capacity())
		}
	}
}

// TestCreditGrantedForLargeGroups: a group with more buckets than its
// filter serves at 1% false positives still grants credits (the grant no
// longer scans them), with a filter of the index's full size that contains
// every bucket.
func TestCreditGrantedForLargeGroups(t *testing.T) {
	m := New(Config{})
	l := Limit{Algorithm: TokenBucket, Limit: 10, Period: time.Second}
	const n = 1<<18 + 1
	ops := make([]Op, 0, 1<<12)
	for i := range n {
		ops = append(ops, Op{Kind: OpTake, Key: fmt.Sprint("k", i), Limit: l, Cost: 1})
		if len(ops) == cap(ops) || i == n-1 {
			m.Apply(&Command{Now: t0, Ops: ops}, nil)
			ops = ops[:0]
		}
	}
	credit := Op{Kind: OpCredit, Holder: "n1", TTL: 20 * time.Second}
	r := m.Apply(&Command{Now: t0, Ops: []Op{credit}}, nil)[0]
	if !r.Allowed || len(r.Filter.words) != indexSize/64 {
		t.Fatalf("credit with %d buckets: allowed %v, %d filter words; want granted with %d", n, r.Allowed, len(r.Filter.words), indexSize/64)
	}
	for i := range n {
		if !r.Filter.MayContain(hashOf(fmt.Sprint("k", i))) {
			t.Fatalf("the filter leaves out bucket k%d", i)
		}
	}
}
