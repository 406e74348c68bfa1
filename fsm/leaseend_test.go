package fsm

import (
	"testing"
	"time"
)

// TestLeaseEndsWithItsWindow: a lease on a window bucket expires when the
// window that counted it ends, however long its TTL: budget of one window
// spent in the next would let the next window admit more than its limit.
func TestLeaseEndsWithItsWindow(t *testing.T) {
	w := int64(time.Second)
	start := t0 - t0%w
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		for _, at := range []int64{start + w/10, start + w*9/10} {
			m := New(Config{})
			l := Limit{Algorithm: alg, Limit: 100, Period: time.Second}
			m.Apply(&Command{Now: start, Ops: []Op{{Kind: OpTake, Key: "k", Limit: l, Cost: 1}}}, nil)
			g := m.Apply(&Command{Now: at, Ops: []Op{{Kind: OpGrant, Key: "k", Limit: l, Cost: 10, Holder: "n1", TTL: 5 * time.Second}}}, nil)[0]
			if !g.Allowed || g.Expires != start+w {
				t.Errorf("%s grant at window+%v: expires %v after the window's start; want the window's end, %v",
					alg, time.Duration(at-start), time.Duration(g.Expires-start), time.Duration(w))
			}
		}
	}
}

// TestLeaseAtItsExpiry: at the instant a lease expires it is over: its
// holder can neither return it for credit nor renew it as a continuation.
func TestLeaseAtItsExpiry(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 100, Period: time.Hour}
	grant := func(m *Machine) Result {
		return m.Apply(&Command{Now: t0, Ops: []Op{{Kind: OpGrant, Key: "k", Limit: l, Cost: 40, Holder: "n1", TTL: time.Second}}}, nil)[0]
	}
	m := New(Config{})
	g := grant(m)
	ret := m.Apply(&Command{Now: g.Expires, Ops: []Op{{Kind: OpReturn, Lease: g.Lease, Cost: 40}}}, nil)[0]
	if ret.Granted != 0 {
		t.Errorf("a return at the expiry instant gave back %d; want 0 (the holder may have spent it all)", ret.Granted)
	}
	m = New(Config{})
	g = grant(m)
	re := m.Apply(&Command{Now: g.Expires, Ops: []Op{{Kind: OpGrant, Key: "k", Limit: l, Cost: 10, Holder: "n1", TTL: time.Second, Lease: g.Lease, Held: 30}}}, nil)[0]
	if re.Granted > 10 {
		t.Errorf("a renewal at the expiry instant carried the old lease: granted %d; want at most the 10 asked for", re.Granted)
	}
}
