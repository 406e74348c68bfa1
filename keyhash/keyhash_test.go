package keyhash_test

import (
	"fmt"
	"testing"

	"github.com/quorate/quorate/keyhash"
	"github.com/quorate/quorate/ring"
)

// TestContract pins the hash (xxhash64, seed 0: a change is a new on-disk
// and wire format, and splits of running clusters would move the wrong
// buckets) and checks that the ring routes by it.
func TestContract(t *testing.T) {
	golden := map[string]uint64{
		"":                 0xef46db3751d8e999, // xxhash64's published value of the empty input
		"api\x00user:42":   0x3611a39b5598bc54,
		"plan_free\x00t_1": 0x8dcb41e67d1cbbcf,
	}
	for k, want := range golden {
		if got := keyhash.Sum(k); got != want {
			t.Errorf("Sum(%q) = %#x, want %#x", k, got, want)
		}
	}
	r, err := ring.New(7)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		k := ring.BucketKey("api", fmt.Sprint("user:", i))
		if a, b := r.ShardFor(k), r.ShardForHash(keyhash.Sum(k)); a != b {
			t.Fatalf("key %q: ShardFor %d, ShardForHash(Sum) %d", k, a, b)
		}
	}
}
