package policy

import (
	"testing"
	"time"

	"github.com/quorate/quorate/fsm"
)

func TestDelayWait(t *testing.T) {
	ms := time.Millisecond
	one := Delay{Burst: 1, Interval: 100 * ms, Max: time.Second}                       // 10/s, burst 1
	five := Delay{Burst: 5, Interval: 100 * ms, Max: 250 * ms}                         // 10/s, capacity 5
	soft := Delay{Burst: 100, Interval: 600 * ms, Friction: 50 * ms, Max: time.Second} // 100/min
	for _, tc := range []struct {
		name   string
		d      Delay
		queued time.Duration
		n      int64
		want   time.Duration
	}{
		{"first of a burst", one, 0, 1, 0},
		{"second waits one interval", one, 100 * ms, 1, 100 * ms},
		{"the shaper's wait is the answer's", one, 1000 * ms, 1, time.Second},
		{"within the capacity: no wait", five, 400 * ms, 1, 0},
		{"the sixth waits one interval", five, 500 * ms, 1, 100 * ms},
		// A request of cost 3 with 3 queued needs 6 of capacity 5: one interval.
		{"cost counts", five, 300 * ms, 3, 100 * ms},
		{"cost far past the capacity is held at most max", five, 0, 1 << 40, 250 * ms},
		{"no wait is never negative", five, 0, 1, 0},
		// 100 queued: the 101st unit is one over the limit, 50ms of friction.
		{"friction: one unit over", soft, 100 * 600 * ms, 1, 50 * ms},
		{"friction: a part of a unit counts whole", soft, 99*600*ms + 1, 1, 50 * ms},
		{"friction: ten units over", soft, 109 * 600 * ms, 1, 500 * ms},
		{"friction: at most max", soft, 200 * 600 * ms, 1, time.Second},
		{"not throttled", Delay{}, time.Second, 1, 0},
	} {
		if got := tc.d.Wait(tc.queued, tc.n); got != tc.want {
			t.Errorf("%s: Wait(%s, %d) = %s, want %s", tc.name, tc.queued, tc.n, got, tc.want)
		}
	}
}

// TestThrottledQueue: the shaper's queue is long enough for max_delay of
// waits and no longer: the last unit it queues, (queue-1) intervals after
// the first, waits (queue-burst) intervals, which is max_delay at most and
// more than max_delay less one interval (Wait's clamp would hide a queue
// too long: a wait past max_delay would be answered as max_delay and the
// request arrive early).
func TestThrottledQueue(t *testing.T) {
	for _, tc := range []struct {
		l   fsm.Limit
		max time.Duration
	}{
		{fsm.Limit{Algorithm: fsm.GCRA, Limit: 10, Period: time.Second, Burst: 1}, time.Second},
		{fsm.Limit{Algorithm: fsm.TokenBucket, Limit: 10, Period: time.Second, Burst: 5}, 250 * time.Millisecond},
		{fsm.Limit{Algorithm: fsm.SlidingWindow, Limit: 7, Period: time.Second}, 2 * time.Second},
		{fsm.Limit{Algorithm: fsm.LeakyShaping, Limit: 3, Period: time.Minute, Burst: 9}, 59 * time.Second},
	} {
		shaper, d := throttled(tc.l, &throttleSpec{maxDelay: tc.max})
		if err := shaper.Validate(); err != nil {
			t.Fatalf("%v: shaper %v: %v", tc.l, shaper, err)
		}
		unclamped := d
		unclamped.Max = time.Hour
		longest := unclamped.Wait(time.Duration(shaper.Burst-1)*d.Interval, 1)
		if longest > tc.max || longest <= tc.max-d.Interval {
			t.Errorf("%v max_delay %s: queue %d gives a longest wait of %s", tc.l, tc.max, shaper.Burst, longest)
		}
	}
}
