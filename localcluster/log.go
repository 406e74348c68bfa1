package localcluster

import (
	"bytes"
	"sync"
)

// Log keeps what an agent writes, for reports when it fails: the last Max
// bytes of it, cut at a line boundary where there is one, or all of it when
// Max is 0. It is safe for concurrent use.
type Log struct {
	Max int

	mu  sync.Mutex
	buf []byte
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - l.Max; l.Max > 0 && over > 0 {
		if i := bytes.IndexByte(l.buf[over:], '\n'); i >= 0 {
			over += i + 1
		}
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

// String returns what the log holds.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}
