package client

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/decide"
)

// waits records the holds the middleware asks for instead of sleeping.
type waits struct {
	mu  sync.Mutex
	got []time.Duration
}

func (w *waits) wait(ctx context.Context, d time.Duration) bool {
	w.mu.Lock()
	w.got = append(w.got, d)
	w.mu.Unlock()
	return ctx.Err() == nil
}

func throttleAnswer(delay time.Duration) *decide.Answer {
	ans := answerOf(decide.Throttle, decide.Throttled, 0)
	ans.Results[0].Delay = delay
	return ans
}

// TestMiddlewareThrottle: a THROTTLE is held for its delay, even past
// MaxDelay (its policy's max_delay bounds it), then the handler runs; the
// answer says THROTTLE and the delay.
func TestMiddlewareThrottle(t *testing.T) {
	w := &waits{}
	cfg := MiddlewareConfig{MaxDelay: 10 * time.Millisecond, Logger: quiet(), wait: w.wait}
	rec, calls, _ := serveMiddleware(&fakeDecider{ans: throttleAnswer(1500 * time.Millisecond)}, cfg, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 || calls != 1 || len(w.got) != 1 || w.got[0] != 1500*time.Millisecond {
		t.Fatalf("throttle: status %d, %d calls, holds %v; want 200, 1, [1.5s]", rec.Code, calls, w.got)
	}
	for k, v := range map[string]string{"X-Rate-Limit-Decision": "THROTTLE", "X-Ratelimit-Delay-Ms": "1500", "Retry-After": ""} {
		if got := rec.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// TestMiddlewareThrottleClientGone: a client that goes away while it is
// held never reaches the handler.
func TestMiddlewareThrottleClientGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	_, calls, _ := serveMiddleware(&fakeDecider{ans: throttleAnswer(time.Hour)}, MiddlewareConfig{Logger: quiet()}, r)
	if calls != 0 {
		t.Fatalf("%d handler calls for a request whose client went away while held, want 0", calls)
	}
}

// TestMiddlewareThrottleSleeps: the default hold is a real wait.
func TestMiddlewareThrottleSleeps(t *testing.T) {
	start := time.Now()
	rec, calls, _ := serveMiddleware(&fakeDecider{ans: throttleAnswer(30 * time.Millisecond)}, MiddlewareConfig{Logger: quiet()}, httptest.NewRequest("GET", "/", nil))
	if took := time.Since(start); rec.Code != 200 || calls != 1 || took < 30*time.Millisecond {
		t.Fatalf("status %d, %d calls after %s; want 200, 1, at least 30ms", rec.Code, calls, took)
	}
}

// TestUnaryInterceptorThrottle: a gRPC call is held as an HTTP request is.
func TestUnaryInterceptorThrottle(t *testing.T) {
	w := &waits{}
	cfg := MiddlewareConfig{Logger: quiet(), wait: w.wait}
	ctx, err := admit(context.Background(), &fakeDecider{ans: throttleAnswer(250 * time.Millisecond)}, &cfg, "/svc/M")
	if err != nil || ctx == nil || len(w.got) != 1 || w.got[0] != 250*time.Millisecond {
		t.Fatalf("admit: %v, holds %v; want admitted after [250ms]", err, w.got)
	}
}
