package main

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/quorate/quorate/localcluster"
)

// devCluster is the cluster of quorate dev: exe runs every node of layout
// (with env added to its environment), and each node's stdout and stderr go
// to stdout and stderr, every line prefixed with "[id] " and written whole
// under mu.
func devCluster(exe string, layout localcluster.Layout, env []string, mu *sync.Mutex, stdout, stderr io.Writer) *localcluster.Cluster {
	return localcluster.New(localcluster.Config{
		Binary: exe, Layout: layout, Env: env, LogMax: 16 << 10, ReadyPoll: devReadyPoll,
		Output: func(id string, _ []string) (localcluster.Output, error) {
			prefix := "[" + id + "] "
			outW := &lineWriter{mu: mu, w: stdout, prefix: prefix}
			errW := &lineWriter{mu: mu, w: stderr, prefix: prefix}
			return localcluster.Output{Stdout: outW, Stderr: errW, OnExit: func() { outW.flush(); errW.flush() }}, nil
		},
	})
}

// devReadyPoll is how often dev asks the nodes whether they are ready.
const devReadyPoll = 250 * time.Millisecond

// devStop sends SIGTERM to every node still running, waits up to grace for
// them to exit, then kills the stragglers, saying so on errOut. It returns
// once every node has exited.
func devStop(c *localcluster.Cluster, grace time.Duration, errOut *lockedWriter) {
	c.StopAll(grace, func(i int) {
		errOut.printf("[dev] %s (pid %d) did not stop within %v; killing it\n", c.Node(i).ID, c.PID(i), grace)
	})
}

// lockedWriter writes to w under mu, shared with the lineWriters of the
// children so that lines from different sources never interleave.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

// Write writes p whole, as printf does.
func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}

// lineWriter writes each complete line written to it to w, with prefix in
// front, under mu. A trailing partial line waits for its newline or flush.
// Errors writing to w are dropped: a closed terminal must not make a child
// fail.
type lineWriter struct {
	mu     *sync.Mutex
	w      io.Writer
	prefix string
	buf    []byte // guarded by mu: the partial last line
}

// maxLine bounds a partial line held back for its newline.
const maxLine = 64 << 10

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	rest := l.buf
	for {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		l.emitLocked(rest[:i+1])
		rest = rest[i+1:]
	}
	if len(rest) > maxLine {
		l.emitLocked(append(rest, '\n'))
		rest = nil
	}
	l.buf = append(l.buf[:0], rest...)
	return len(p), nil
}

func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.emitLocked(append(l.buf, '\n'))
		l.buf = l.buf[:0]
	}
}

func (l *lineWriter) emitLocked(line []byte) {
	_, _ = io.WriteString(l.w, l.prefix)
	_, _ = l.w.Write(line)
}
