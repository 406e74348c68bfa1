package bench

import (
	"context"
	"time"
)

// Clock is the time source of a run. Tests inject a manual clock to check
// the open-loop schedule without depending on the machine's speed.
type Clock interface {
	// Now returns the current time (with a monotonic reading, like
	// time.Now, so that durations between readings are exact).
	Now() time.Time
	// SleepUntil blocks until t or until ctx is done, returning ctx's
	// error in that case. A t not after Now returns at once.
	SleepUntil(ctx context.Context, t time.Time) error
}

// SystemClock is the machine's clock.
type SystemClock struct{}

// Now is time.Now.
func (SystemClock) Now() time.Time { return time.Now() }

// SleepUntil sleeps on a timer until t.
func (SystemClock) SleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
