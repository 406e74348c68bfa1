// Package exact is the integer arithmetic of rate limits: bucket arithmetic
// multiplies counts by durations (up to 2^40 × 2^55), which does not fit in
// 64 bits. These functions compute a·b/c exactly through a 128-bit
// intermediate and saturate instead of wrapping, so that every replica on
// every architecture computes the same bits, and so that the checkers that
// judge a cluster's answers (chaos/check) compute them as the state machine
// does. Arguments are non-negative.
package exact

import (
	"math"
	"math/bits"
)

// MulDiv returns floor(a*b/c), saturated at math.MaxInt64.
func MulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// MulDivCeil returns ceil(a*b/c), saturated at math.MaxInt64.
func MulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// MulLE reports whether a*b <= c*d, exactly.
func MulLE(a, b, c, d int64) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	return h1 < h2 || (h1 == h2 && l1 <= l2)
}

// Add returns a+b saturated at math.MaxInt64 (b >= 0).
func Add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Mul returns a*b saturated at math.MaxInt64 (a, b >= 0).
func Mul(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}
