package browser

import "sync"

// tail keeps the last max bytes written to it: Chromium's output and the
// page's console are only read when a test fails, and must not grow
// without bound in a long one. Safe for concurrent use.
type tail struct {
	max int

	mu  sync.Mutex
	buf []byte // guarded by mu
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
