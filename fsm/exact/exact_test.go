package exact

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// ref computes floor or ceil of a·b/c with big integers, saturated.
func ref(a, b, c int64, ceil bool) int64 {
	n := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	q, r := new(big.Int).QuoRem(n, big.NewInt(c), new(big.Int))
	if ceil && r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return math.MaxInt64
	}
	return q.Int64()
}

func refMul(a, b int64) int64 {
	n := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// operand draws non-negative values across all magnitudes, edges included.
func operand(r *rand.Rand) int64 {
	switch r.IntN(4) {
	case 0:
		return []int64{0, 1, 2, math.MaxInt64, math.MaxInt64 - 1, 1 << 32, 1<<40 - 1}[r.IntN(7)]
	case 1:
		return r.Int64N(1000)
	default:
		return r.Int64() >> r.IntN(63)
	}
}

func TestAgainstBigInt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		a, b, c, d := operand(r), operand(r), max(1, operand(r)), operand(r)
		if got, want := MulDiv(a, b, c), ref(a, b, c, false); got != want {
			t.Fatalf("MulDiv(%d, %d, %d) = %d, want %d", a, b, c, got, want)
		}
		if got, want := MulDivCeil(a, b, c), ref(a, b, c, true); got != want {
			t.Fatalf("MulDivCeil(%d, %d, %d) = %d, want %d", a, b, c, got, want)
		}
		if got, want := Mul(a, b), refMul(a, b); got != want {
			t.Fatalf("Mul(%d, %d) = %d, want %d", a, b, got, want)
		}
		want := new(big.Int).Mul(big.NewInt(a), big.NewInt(b)).Cmp(new(big.Int).Mul(big.NewInt(c), big.NewInt(d))) <= 0
		if got := MulLE(a, b, c, d); got != want {
			t.Fatalf("MulLE(%d, %d, %d, %d) = %v, want %v", a, b, c, d, got, want)
		}
		sum := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
		wantAdd := int64(math.MaxInt64)
		if sum.IsInt64() {
			wantAdd = sum.Int64()
		}
		if got := Add(a, b); got != wantAdd {
			t.Fatalf("Add(%d, %d) = %d, want %d", a, b, got, wantAdd)
		}
	}
}
