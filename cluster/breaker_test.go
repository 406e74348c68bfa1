package cluster

import (
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBreaker(2, time.Second, func() time.Time { return now })
	steps := []struct {
		do    string
		shard int
		want  bool
		after time.Duration
	}{
		{do: "allow", shard: 0, want: true},
		{do: "fail", shard: 0},
		{do: "allow", shard: 0, want: false}, // open: answered at once
		{do: "allow", shard: 1, want: true},  // other shards unaffected
		{do: "allow", shard: 0, want: false, after: 999 * time.Millisecond},
		{do: "allow", shard: 0, want: true, after: time.Millisecond}, // cool-down over: one probe
		{do: "allow", shard: 0, want: false},                         // only one probe at a time
		{do: "fail", shard: 0},                                       // probe failed: open again
		{do: "allow", shard: 0, want: false},
		{do: "allow", shard: 0, want: true, after: time.Second},
		{do: "ok", shard: 0}, // probe succeeded: closed
		{do: "allow", shard: 0, want: true},
		{do: "allow", shard: 0, want: true},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		switch s.do {
		case "allow":
			if got := b.allow(s.shard); got != s.want {
				t.Fatalf("step %d: allow(%d) = %v, want %v", i, s.shard, got, s.want)
			}
		case "fail":
			b.failure(s.shard)
		case "ok":
			b.success(s.shard)
		}
	}
}
