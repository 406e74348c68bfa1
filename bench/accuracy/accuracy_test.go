package accuracy

import (
	"errors"
	"testing"
	"time"
)

const (
	ms = int64(time.Millisecond)
	s  = int64(time.Second)
)

// arrivals builds n arrivals at one instant, all admitted or all denied.
func at(bucket uint64, t int64, n int, admitted bool) []Arrival {
	out := make([]Arrival, n)
	for i := range out {
		out[i] = Arrival{Bucket: bucket, At: t, Cost: 1, Admitted: admitted}
	}
	return out
}

func join(parts ...[]Arrival) []Arrival {
	var out []Arrival
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func account(t *testing.T, l Limit, as []Arrival) Report {
	t.Helper()
	r, err := Account(l, as)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func check(t *testing.T, got Report, admitted, allowed, over, under int64) {
	t.Helper()
	if got.Admitted != admitted || got.AllowedByLimit != allowed || got.OverAdmitted != over || got.UnderAdmitted != under {
		t.Errorf("admitted/allowed/over/under = %d/%d/%d/%d; want %d/%d/%d/%d",
			got.Admitted, got.AllowedByLimit, got.OverAdmitted, got.UnderAdmitted, admitted, allowed, over, under)
	}
}

func TestTokenBucketBurst(t *testing.T) {
	// Capacity 2, nothing refills within the instant: of three checks at
	// t=0 only two fit. A limiter that admitted all three over-admitted one.
	l := Limit{Family: TokenBucket, Limit: 2, Period: time.Second}
	check(t, account(t, l, at(1, 0, 3, true)), 3, 2, 1, 0)
	// One that admitted the first two and denied the third is exact.
	check(t, account(t, l, join(at(1, 0, 2, true), at(1, 0, 1, false))), 2, 2, 0, 0)
	// One that admitted only one under-admitted one.
	check(t, account(t, l, join(at(1, 0, 1, true), at(1, 0, 2, false))), 1, 2, 0, 1)
}

func TestTokenBucketExactRefill(t *testing.T) {
	// 3 per second, capacity 3. Fractions of a token carry over exactly
	// (in scaled units a token is 1e9):
	//   0ms     3 of 3 fit                      → 0
	//   1000ms  refilled exactly 3: 3 of 4 fit  → 0
	//   1333ms  0.999 < 1                        deny
	//   1334ms  1.002                            take → 0.002
	//   1667ms  0.002 + 0.999 = 1.001            take → 0.001
	//   2000ms  0.001 + 0.999 = 1 exactly        take (a float refill may miss it)
	l := Limit{Family: TokenBucket, Limit: 3, Period: time.Second}
	as := join(at(1, 0, 3, true), at(1, 1000*ms, 3, true), at(1, 1000*ms, 1, false),
		at(1, 1333*ms, 1, false), at(1, 1334*ms, 1, true), at(1, 1667*ms, 1, true), at(1, 2000*ms, 1, true))
	check(t, account(t, l, as), 9, 9, 0, 0)

	// Admitting everything over-admits exactly the two that did not fit.
	for i := range as {
		as[i].Admitted = true
	}
	check(t, account(t, l, as), 11, 9, 2, 0)

	// Admitting only the first three under-admits six.
	for i := range as {
		as[i].Admitted = i < 3
	}
	check(t, account(t, l, as), 3, 9, 0, 6)
}

func TestTokenBucketCapacityCapsFractions(t *testing.T) {
	// Capacity 1 at 3 per second: a bucket that is full cannot bank the
	// fraction beyond its capacity, so refills do not add up across a
	// full spell: 0 take; 333ms 0.999 deny; 334ms min(1, 1.002) = 1 take
	// → 0; 667ms 0.999 deny; 1000ms 0.999+0.999 → 1 take.
	l := Limit{Family: TokenBucket, Limit: 3, Period: time.Second, Burst: 1}
	as := join(at(1, 0, 1, true), at(1, 333*ms, 1, false), at(1, 334*ms, 1, true), at(1, 667*ms, 1, false), at(1, 1000*ms, 1, true))
	check(t, account(t, l, as), 3, 3, 0, 0)
}

func TestTokenBucketRefillCapsAtCapacity(t *testing.T) {
	// After a long quiet spell the bucket holds its capacity, not more:
	// 5 per second, burst 5, 10 arrivals after 10s → 5 fit.
	l := Limit{Family: TokenBucket, Limit: 5, Period: time.Second}
	as := join(at(1, 0, 5, true), at(1, 10*s, 10, true))
	check(t, account(t, l, as), 15, 10, 5, 0)
}

func TestTokenBucketCost(t *testing.T) {
	// Capacity 10, cost 4: two fit (8), the third (12) does not; after
	// 400ms at 10/s, 4 more tokens have come: 2+4 = 6 ≥ 4, one more fits.
	l := Limit{Family: TokenBucket, Limit: 10, Period: time.Second}
	as := []Arrival{
		{Bucket: 1, At: 0, Cost: 4, Admitted: true},
		{Bucket: 1, At: 0, Cost: 4, Admitted: true},
		{Bucket: 1, At: 0, Cost: 4, Admitted: true},
		{Bucket: 1, At: 400 * ms, Cost: 4, Admitted: true},
	}
	check(t, account(t, l, as), 4, 3, 1, 0)
}

func TestTokenBucketHugeNumbers(t *testing.T) {
	// 2^40 per 366 days: capacity·period is about 3.5·10^28, far beyond
	// 64 bits. Everything at one instant up to the capacity fits.
	l := Limit{Family: TokenBucket, Limit: 1 << 40, Period: 366 * 24 * time.Hour}
	as := []Arrival{{Bucket: 1, At: 5 * s, Cost: 1 << 39, Admitted: true}, {Bucket: 1, At: 5 * s, Cost: 1 << 39, Admitted: true},
		{Bucket: 1, At: 5 * s, Cost: 1, Admitted: false}}
	check(t, account(t, l, as), 2, 2, 0, 0)
}

func TestSlidingWindow(t *testing.T) {
	// 10 per 1s windows aligned to the epoch.
	//   [0,1s)   10 at 100ms: all fit (cur 10).
	//   1.5s     prev 10 weighs 10·0.5 = 5: 5 of 8 fit (cur 5).
	//   1.9s     prev weighs 10·0.1 = 1, cur 5: 4 of 5 fit (the fourth
	//            exactly: 8+1+1 = 10).
	//   3.2s     two windows later both counts are gone: 10 of 12 fit.
	l := Limit{Family: SlidingWindow, Limit: 10, Period: time.Second}
	as := join(at(1, 100*ms, 10, true), at(1, 1500*ms, 8, true), at(1, 1900*ms, 5, true), at(1, 3200*ms, 12, true))
	check(t, account(t, l, as), 35, 29, 6, 0)
}

func TestFixedWindow(t *testing.T) {
	// 3 per window: 3 of 5 at 0.9s and 3 of 5 at 1.1s; a fixed window
	// admits 6 within 200ms across its boundary, and that is exact for it.
	l := Limit{Family: FixedWindow, Limit: 3, Period: time.Second}
	as := join(at(1, 900*ms, 3, true), at(1, 900*ms, 2, false), at(1, 1100*ms, 3, true), at(1, 1100*ms, 2, false))
	check(t, account(t, l, as), 6, 6, 0, 0)
}

func TestSlidingLog(t *testing.T) {
	// At most 3 in any interval (t-1s, t]: 3 at 0; at 999ms the log is
	// full; at exactly 1s the entries of t=0 have left it.
	l := Limit{Family: SlidingLog, Limit: 3, Period: time.Second}
	as := join(at(1, 0, 3, true), at(1, 999*ms, 1, true), at(1, 1000*ms, 1, true))
	check(t, account(t, l, as), 5, 4, 1, 0)
}

func TestRefundedIsNeitherAdmittedNorDemand(t *testing.T) {
	// Capacity 1. The first check's request was denied by another limit,
	// so its charge was refunded: the bucket still has room for the second.
	l := Limit{Family: TokenBucket, Limit: 1, Period: time.Second}
	as := []Arrival{
		{Bucket: 1, At: 0, Cost: 1, Refunded: true},
		{Bucket: 1, At: 0, Cost: 1, Admitted: true},
	}
	r := account(t, l, as)
	check(t, r, 1, 1, 0, 0)
	if r.Checks != 2 {
		t.Errorf("checks %d; want 2", r.Checks)
	}
}

func TestBucketsAreIndependentAndInputUnsorted(t *testing.T) {
	// Two buckets interleaved and out of time order: bucket 1 over-admits
	// one, bucket 2 under-admits one; the totals keep both (they do not
	// cancel out).
	l := Limit{Family: TokenBucket, Limit: 1, Period: time.Second}
	as := []Arrival{
		{Bucket: 2, At: 2 * s, Cost: 1, Admitted: false},
		{Bucket: 1, At: 0, Cost: 1, Admitted: true},
		{Bucket: 2, At: 0, Cost: 1, Admitted: true},
		{Bucket: 1, At: 100 * ms, Cost: 1, Admitted: true},
	}
	r := account(t, l, as)
	check(t, r, 3, 3, 1, 1)
	if r.Buckets != 2 {
		t.Errorf("buckets %d; want 2", r.Buckets)
	}
	if got := r.Ratio(); got != 1 {
		t.Errorf("ratio %v; want 1 (3 admitted of 3 allowed, errors in both directions)", got)
	}
}

func TestReportAddAndRatio(t *testing.T) {
	var r Report
	r.Add(Report{Checks: 10, Admitted: 4, AllowedByLimit: 5, UnderAdmitted: 1, Buckets: 1})
	r.Add(Report{Checks: 10, Admitted: 5, AllowedByLimit: 5, Buckets: 1})
	if r.Checks != 20 || r.Admitted != 9 || r.AllowedByLimit != 10 || r.UnderAdmitted != 1 || r.Buckets != 2 {
		t.Errorf("sum %+v", r)
	}
	if got := r.Ratio(); got != 0.9 {
		t.Errorf("ratio %v; want 0.9", got)
	}
	if got := (Report{}).Ratio(); got != 1 {
		t.Errorf("empty ratio %v; want 1", got)
	}
}

func TestValidation(t *testing.T) {
	for _, l := range []Limit{
		{Family: 0, Limit: 1, Period: time.Second},
		{Family: TokenBucket, Limit: 0, Period: time.Second},
		{Family: TokenBucket, Limit: 10, Period: 5}, // faster than 1 per ns
		{Family: TokenBucket, Limit: 1, Period: time.Second, Burst: -1},
	} {
		if _, err := Account(l, nil); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	if _, err := FamilyOf("bogus"); !errors.Is(err, ErrAlgorithm) {
		t.Errorf("FamilyOf(bogus): %v", err)
	}
	for name, want := range map[string]Family{
		"token_bucket": TokenBucket, "gcra": TokenBucket, "leaky_bucket_policing": TokenBucket,
		"leaky_bucket_shaping": TokenBucket, "sliding_window": SlidingWindow, "fixed_window": FixedWindow,
		"sliding_log": SlidingLog,
	} {
		if got, err := FamilyOf(name); err != nil || got != want {
			t.Errorf("FamilyOf(%s) = %v, %v; want %v", name, got, err, want)
		}
	}
}

func TestMergedChecks(t *testing.T) {
	// One request took the same bucket twice (cost 1 each) as one arrival
	// of cost 2: with one token left it does not fit, and both checks are
	// demand the exact limiter also denies: no under-admission.
	l := Limit{Family: TokenBucket, Limit: 3, Period: time.Hour}
	as := []Arrival{
		{Bucket: 1, At: 0, Cost: 2, Checks: 2, Admitted: true},
		{Bucket: 1, At: 1, Cost: 2, Checks: 2, Admitted: false},
		{Bucket: 1, At: 2, Cost: 1, Checks: 1, Admitted: true},
	}
	r := account(t, l, as)
	check(t, r, 3, 3, 0, 0)
	if r.Checks != 5 {
		t.Errorf("checks %d; want 5", r.Checks)
	}
}

func TestPrepaidFirstChargeMayPrecedeItsDecision(t *testing.T) {
	// Capacity 2 at 1 per second. A lease of 2 was granted at 100ms, right
	// after the first request was sent at 0, and spent at 500ms; the
	// bucket, charged at 100ms, had refilled one token by 1.1s. Judged by
	// spend times alone the third admission (at 1.1s) looks premature;
	// with the first charge allowed back to the first send, it fits.
	l := Limit{Family: TokenBucket, Limit: 1, Period: time.Second, Burst: 2}
	as := []Arrival{
		{Bucket: 1, At: 500 * ms, Sent: 0, Cost: 1, Admitted: true, Prepaid: true},
		{Bucket: 1, At: 500 * ms, Sent: 10 * ms, Cost: 1, Admitted: true, Prepaid: true},
		{Bucket: 1, At: 1100 * ms, Sent: 1000 * ms, Cost: 1, Admitted: true, Prepaid: true},
	}
	check(t, account(t, l, as), 3, 3, 0, 0)
	// The same decisions not prepaid (strict: charged when decided) are
	// held to their decision times: the third is over the limit.
	for i := range as {
		as[i].Prepaid = false
	}
	check(t, account(t, l, as), 3, 2, 1, 0)
}
