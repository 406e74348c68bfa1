package ring_test

import (
	"fmt"

	"github.com/quorate/quorate/ring"
)

func ExampleRing_ShardFor() {
	r, err := ring.New(16)
	if err != nil {
		panic(err)
	}
	shard := r.ShardFor("tenant:acme")
	lo, hi := r.Range(shard)
	fmt.Printf("shard %d owns [%#x, %#x]\n", shard, lo, hi)
	// Output: shard 5 owns [0x5000000000000000, 0x5fffffffffffffff]
}

func ExamplePlace() {
	nodes := []string{"node-a", "node-b", "node-c", "node-d", "node-e"}
	// The first replica is the preferred leader. This output is pinned on
	// purpose: if it changes, every running cluster would reshuffle.
	fmt.Println(ring.Place(7, nodes, 3))
	// Output: [node-d node-a node-e]
}

func ExampleBucketKey() {
	r, err := ring.New(16)
	if err != nil {
		panic(err)
	}
	// The shard a check item {name: "api", key: "user:42"} is decided on.
	fmt.Println(r.ShardFor(ring.BucketKey("api", "user:42")))
	// Output: 3
}
