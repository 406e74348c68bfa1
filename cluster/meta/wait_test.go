package meta

import (
	"context"
	"testing"
	"time"
)

// TestWaitVersion: a waiter wakes when the policy change it waits for is
// applied (or restored), not before, and gives up when its context ends.
// Without the notification the waiters below would sleep out their
// contexts and report false.
func TestWaitVersion(t *testing.T) {
	var f FSM
	if !f.WaitVersion(context.Background(), 0) {
		t.Fatal("version 0 is applied from the start")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := func(f *FSM, v uint64) <-chan bool {
		done := make(chan bool, 1)
		go func() { done <- f.WaitVersion(ctx, v) }()
		return done
	}
	got := func(done <-chan bool, what string) bool {
		t.Helper()
		select {
		case ok := <-done:
			return ok
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the waiter was never woken", what)
			return false
		}
	}
	pending := func(done <-chan bool, what string) {
		t.Helper()
		select {
		case ok := <-done:
			t.Fatalf("%s: the waiter returned %v early", what, ok)
		case <-time.After(20 * time.Millisecond):
		}
	}

	now := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).UnixNano()
	one, two := wait(&f, 1), wait(&f, 2)
	pending(one, "before any change")
	applyMeta(t, &f, Command{Op: OpApply, Now: now, Policies: mustParse(t, metaDoc)})
	if !got(one, "version 1 applied") {
		t.Fatal("the waiter for version 1 reported false")
	}
	// A change that changes nothing keeps the version: the second waiter
	// keeps waiting (it may wake, look and wait again).
	applyMeta(t, &f, Command{Op: OpApply, Now: now + 1, Policies: mustParse(t, metaDoc)})
	pending(two, "after a no-op change")
	applyMeta(t, &f, Command{Op: OpDelete, Now: now + 2, IDs: []string{"a"}})
	if !got(two, "version 2 applied") {
		t.Fatal("the waiter for version 2 reported false")
	}

	// A restore to a later version wakes its waiters too.
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var g FSM
	restored := wait(&g, 2)
	pending(restored, "before the restore")
	if err := g.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if !got(restored, "restored at version 2") {
		t.Fatal("the waiter on the restored replica reported false")
	}

	// The context bounds the wait.
	three := wait(&f, 3)
	pending(three, "version 3 is never applied")
	cancel()
	if got(three, "context cancelled") {
		t.Fatal("a waiter whose context ended reported true")
	}
}
