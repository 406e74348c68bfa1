package topk_test

import (
	"fmt"
	"time"

	"github.com/quorate/quorate/telemetry/topk"
)

// A node observes every decided policy of every check; an admin call asks
// each node for its summaries and merges them.
func Example() {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nodes := make([]*topk.Tracker, 3)
	for i := range nodes {
		nodes[i], _ = topk.New(topk.Config{})
	}
	for i := range 300 {
		key := "t_1\x1f/v1/orders"
		if i%3 == 0 {
			key = fmt.Sprintf("t_%d\x1f/v1/search", i%7)
		}
		nodes[i%3].Observe("per_route", key, 1, i%2 == 0, now.Add(time.Duration(i)*100*time.Millisecond))
	}
	at := now.Add(time.Minute)
	var answers [][]topk.Summary
	for _, n := range nodes {
		ss, _ := n.Summaries(at, 5*time.Minute, topk.Denied, "per_route", n.K())
		answers = append(answers, ss)
	}
	for _, s := range topk.Combine(answers...) {
		for _, e := range s.Top(2).Entries {
			fmt.Printf("%s %q denied %d (±%d)\n", s.Policy, e.Key, e.Count, e.Err)
		}
	}
	// Output:
	// per_route "t_1\x1f/v1/orders" denied 100 (±0)
	// per_route "t_0\x1f/v1/search" denied 8 (±0)
}
