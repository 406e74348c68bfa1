package await

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct{ failed string }

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestUntilReturnsOnceTheStateHolds(t *testing.T) {
	var calls atomic.Int32
	ft := &fakeT{}
	Until(ft, 10*time.Second, func() error {
		if calls.Add(1) < 3 {
			return errors.New("not ready")
		}
		return nil
	})
	if ft.failed != "" || calls.Load() != 3 {
		t.Errorf("failed %q after %d calls; want success on the third", ft.failed, calls.Load())
	}
}

func TestUntilFailsWithTheLastError(t *testing.T) {
	var calls atomic.Int32
	ft := &fakeT{}
	start := time.Now()
	Until(ft, 50*time.Millisecond, func() error { return fmt.Errorf("attempt %d refused", calls.Add(1)) })
	if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %s; want about 50ms", d)
	}
	want := fmt.Sprintf("attempt %d refused", calls.Load())
	if !strings.Contains(ft.failed, "still after 50ms") || !strings.HasSuffix(ft.failed, want) {
		t.Errorf("failure %q; want the last error %q", ft.failed, want)
	}
}

func TestTrueNamesTheState(t *testing.T) {
	ft := &fakeT{}
	True(ft, 20*time.Millisecond, "n2 to be ready", func() bool { return false })
	if !strings.HasPrefix(ft.failed, "waiting for n2 to be ready: still after 20ms") {
		t.Errorf("failure %q", ft.failed)
	}
	ft = &fakeT{}
	True(ft, time.Second, "anything", func() bool { return true })
	if ft.failed != "" {
		t.Errorf("failed %q on a state that holds", ft.failed)
	}
}

func TestWaitChecksOnceMoreAtTheDeadline(t *testing.T) {
	// The state arrives during the last sleep: the check after the
	// deadline sees it.
	deadline := time.Now().Add(30 * time.Millisecond)
	err := Wait(30*time.Millisecond, func() error {
		if time.Now().Before(deadline) {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Errorf("Wait = %v", err)
	}
}

func TestUntilEveryPollsAtItsInterval(t *testing.T) {
	var calls atomic.Int32
	ft := &fakeT{}
	UntilEvery(ft, 100*time.Millisecond, 30*time.Millisecond, func() error {
		calls.Add(1)
		return errors.New("never")
	})
	// At 0, 30, 60, 90 and once after the deadline: about five, never the
	// dozen a backing-off poll from 5ms would make.
	if n := calls.Load(); n < 3 || n > 7 || ft.failed == "" {
		t.Errorf("%d calls, failure %q; want about five and a failure", n, ft.failed)
	}
}
