package fsm

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quorate/quorate/fsm/exact"
)

// TestTokenBucketNoDrift polls a bucket that never fills at odd instants
// for 100s: it must admit exactly burst + every token accrued, not one fewer.
func TestTokenBucketNoDrift(t *testing.T) {
	for _, step := range []time.Duration{7 * time.Millisecond, 333333 * time.Nanosecond, 1234567 * time.Nanosecond} {
		l := Limit{Algorithm: TokenBucket, Limit: 3, Period: time.Second, Burst: 10}
		m := New(Config{})
		var admitted, last int64
		for now := t0; now <= t0+int64(100*time.Second); now += int64(step) {
			if m.Take(time.Unix(0, now), "k", l, 1).Allowed {
				admitted++
			}
			last = now
		}
		// Exact rational refill: every whole token accrued by the last poll.
		if want := 10 + 3*(last-t0)/int64(time.Second); admitted != want {
			t.Errorf("step %s: admitted %d, want exactly %d", step, admitted, want)
		}
	}
}

func TestEncodeDeltaRoundsUp(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	cases := []int64{0, 1, 65535, 65536, 65537, 1<<20 + 1, 1<<40 - 1, math.MaxInt64 / 4}
	for range 10000 {
		cases = append(cases, r.Int64N(1<<uint(1+r.IntN(60))))
	}
	for _, d := range cases {
		c := encodeDelta(d)
		got := decodeDelta(c)
		if c >= 1<<fullBits {
			t.Fatalf("encodeDelta(%d) = %#x overflows %d bits", d, c, fullBits)
		}
		if got < d || (d > 0 && float64(got-d) > float64(d)/32768+1) {
			t.Fatalf("decode(encode(%d)) = %d: must round up by at most 1/32768", d, got)
		}
	}
}

func TestPackedBaseRange(t *testing.T) {
	for _, base := range []int64{-MaxLimit, -1, 0, 1, MaxLimit} {
		s := newTB(base, 12345, 12345+int64(time.Hour))
		if s.base() != base || s.anchor != 12345 || s.full() < 12345+int64(time.Hour) {
			t.Fatalf("newTB(%d) round trip: base %d full %d", base, s.base(), s.full())
		}
	}
}

// TestTokenBucketNoDriftFastRate: at 3 tokens per µs one token is a third of
// a nanosecond, so rounding time to whole nanoseconds at every refill would
// lose thousands of tokens over these polls. Exact refill loses none.
func TestTokenBucketNoDriftFastRate(t *testing.T) {
	l := Limit{Algorithm: TokenBucket, Limit: 3_000_000, Period: time.Second, Burst: 1_000_000}
	m := New(Config{})
	var admitted, last int64
	for now := t0; now <= t0+int64(10*time.Second); now += int64(1234567) {
		at := time.Unix(0, now)
		if r := m.Take(at, "k", l, 0); r.Remaining > 0 {
			if !m.Take(at, "k", l, r.Remaining).Allowed {
				t.Fatal("peeked remaining was not allowed")
			}
			admitted += r.Remaining
		}
		last = now
	}
	if want := l.Burst + exact.MulDiv(last-t0, l.Limit, int64(l.Period)); admitted != want {
		t.Fatalf("admitted %d, want exactly %d (lost %d)", admitted, want, want-admitted)
	}
}
