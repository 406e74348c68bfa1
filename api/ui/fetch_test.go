package ui

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/internal/clock"
)

// Open pages must cost the cluster one fan-out however many there are:
// callers during a call share it, and callers soon after share its answer.
func TestOverviewCallsAreShared(t *testing.T) {
	src := newFakeSource()
	src.block = make(chan struct{})
	clk := clock.NewManual(t0)
	f := newFetcher(src, clk.Now)

	var wg sync.WaitGroup
	got := make([]*Overview, 5)
	for i := range got {
		wg.Go(func() {
			ov, err := f.get(context.Background())
			if err != nil {
				t.Errorf("get: %v", err)
			}
			got[i] = ov
		})
	}
	// Every caller is waiting on the one call before it is let go.
	await.True(t, 5*time.Second, "all callers to wait on one call", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.mu.call != nil && f.mu.call.joined == len(got)
	})
	close(src.block)
	wg.Wait()
	if n := src.callCount(); n != 1 || got[0] == nil || got[4] != got[0] {
		t.Fatalf("%d callers made %d source calls, want 1", len(got), n)
	}

	clk.Advance(reuseFor - time.Millisecond)
	if _, err := f.get(context.Background()); err != nil || src.callCount() != 1 {
		t.Fatalf("within reuseFor: %d calls (%v), want the answer reused", src.callCount(), err)
	}
	clk.Advance(time.Millisecond)
	if _, err := f.get(context.Background()); err != nil || src.callCount() != 2 {
		t.Fatalf("after reuseFor: %d calls (%v), want a fresh one", src.callCount(), err)
	}
}

// A caller that gives up does not cancel the call the others wait on.
func TestCallerLeavingDoesNotCancelSharedCall(t *testing.T) {
	src := newFakeSource()
	src.block = make(chan struct{})
	f := newFetcher(src, clock.NewManual(t0).Now)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := f.get(ctx); errc <- err }()
	await.True(t, 5*time.Second, "the call to start", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.mu.call != nil
	})
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("the leaving caller got %v, want context.Canceled", err)
	}
	close(src.block)
	if ov, err := f.get(context.Background()); err != nil || ov == nil {
		t.Fatalf("the next caller: %v %v", ov, err)
	}
	if n := src.callCount(); n != 1 {
		t.Fatalf("%d source calls, want the first to have gone on", n)
	}
}

// A failed call is not reused: the next caller asks again.
func TestFailuresAreNotReused(t *testing.T) {
	src := newFakeSource()
	src.err = context.DeadlineExceeded
	f := newFetcher(src, clock.NewManual(t0).Now)
	for range 2 {
		if _, err := f.get(context.Background()); err == nil {
			t.Fatal("want the source's error")
		}
	}
	if n := src.callCount(); n != 2 {
		t.Fatalf("%d source calls, want 2", n)
	}
}
