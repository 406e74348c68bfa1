package cluster

import (
	"testing"
	"time"
)

// A node that is not ready says why at once, then every notReadyEvery.
func TestThrottle(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)
	var th throttle
	for _, step := range []struct {
		at   time.Duration
		want bool
	}{
		{0, true},                        // the first time
		{100 * time.Millisecond, false},  // the next poll
		{1999 * time.Millisecond, false}, // not yet two seconds
		{2 * time.Second, true},
		{3 * time.Second, false},
		{10 * time.Second, true}, // after a long gap, at once
		{11 * time.Second, false},
	} {
		if got := th.due(t0.Add(step.at), notReadyEvery); got != step.want {
			t.Errorf("due at +%v = %v; want %v", step.at, got, step.want)
		}
	}
}
