// Package await lets a test wait for a state instead of sleeping for a time
// it hopes is long enough: it polls a condition until it holds.
package await

import (
	"errors"
	"fmt"
	"time"
)

// Poll bounds: the first retry comes soon, so a state that is nearly there
// costs little; later ones back off so a slow one does not busy the CPU that
// the system under test needs.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 100 * time.Millisecond
)

// TB is the part of testing.TB that Until uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Until polls cond until it returns nil and fails the test (Fatalf) with
// cond's last error if timeout passes first. Call it from the test's
// goroutine; elsewhere use Wait.
func Until(t TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Wait(timeout, cond); err != nil {
		t.Fatalf("%v", err)
	}
}

// True is Until for a condition that only says whether it holds: what
// names the state in the failure ("n2 to be ready").
func True(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := Wait(timeout, func() error {
		if !cond() {
			return errNotYet
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

var errNotYet = errors.New("not yet")

// UntilEvery is Until polling every interval, for a test that measures
// how soon the state is reached and needs that resolution.
func UntilEvery(t TB, timeout, every time.Duration, cond func() error) {
	t.Helper()
	if err := wait(timeout, every, cond); err != nil {
		t.Fatalf("%v", err)
	}
}

// Wait polls cond until it returns nil, or returns an error holding cond's
// last error once timeout has passed. cond runs at least once, and once
// more after the timeout has passed, so a state reached during the last
// sleep counts.
func Wait(timeout time.Duration, cond func() error) error {
	return wait(timeout, 0, cond)
}

// wait is Wait polling every interval, or backing off if every is 0.
func wait(timeout, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	poll := firstPoll
	if every > 0 {
		poll = every
	}
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still after %s: %w", timeout, err)
		}
		time.Sleep(min(poll, time.Until(deadline)+time.Millisecond))
		if every == 0 {
			poll = min(2*poll, maxPoll)
		}
	}
}
