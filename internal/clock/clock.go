// Package clock is a manual clock for tests: time that moves only when a
// test moves it, for the code that takes its clock as a parameter.
package clock

import (
	"sync"
	"time"
)

// Manual is a clock that moves only when told. Safe for concurrent use.
type Manual struct {
	mu sync.Mutex
	t  time.Time // guarded by mu
}

// NewManual returns a clock reading t.
func NewManual(t time.Time) *Manual { return &Manual{t: t} }

// Now reads the clock.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Manual) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
