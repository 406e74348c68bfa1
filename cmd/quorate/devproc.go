package main

import (
	"bytes"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/quorate/quorate/cluster/agentproc"
)

// supervisor runs the agents of "quorate dev" as child processes. It is used
// by one goroutine; each child has its own goroutine waiting for it to exit.
type supervisor struct {
	children []*child
	// exits receives each child once, after it has exited. It has room for
	// every child, so a child's goroutine never blocks on it.
	exits chan *child
	// errOut is where the supervisor reports what it does to children.
	errOut *lockedWriter
}

// child is one agent process.
type child struct {
	node devNode
	proc *agentproc.Proc
	pid  int
	// done is closed once the process has exited and its output is flushed.
	done <-chan struct{}
}

// exitDesc says how the child exited. Call it only after done is closed.
func (c *child) exitDesc() string { return c.proc.Exit() }

// start runs exe with args (and env added to this process's environment) as
// node n. Its stdout and stderr go to stdout and stderr, each line prefixed
// with "[id] " and written whole under mu.
func (s *supervisor) start(n devNode, exe string, args, env []string, mu *sync.Mutex, stdout, stderr io.Writer) error {
	prefix := "[" + n.id + "] "
	outW := &lineWriter{mu: mu, w: stdout, prefix: prefix}
	errW := &lineWriter{mu: mu, w: stderr, prefix: prefix}
	p, err := agentproc.Start(exe, args, agentproc.Options{Stdout: outW, Stderr: errW, Env: env, Detach: true,
		OnExit: func() { outW.flush(); errW.flush() }})
	if err != nil {
		return fmt.Errorf("dev: starting %s: %w", n.id, err)
	}
	c := &child{node: n, proc: p, pid: p.PID(), done: p.Done()}
	s.children = append(s.children, c)
	go func() {
		<-c.done
		s.exits <- c
	}()
	return nil
}

// stop sends SIGTERM to every child still running, waits up to grace for
// them to exit, then kills the stragglers. It returns once every child has
// exited.
func (s *supervisor) stop(grace time.Duration) {
	procs := make([]*agentproc.Proc, len(s.children))
	for i, c := range s.children {
		procs[i] = c.proc
	}
	agentproc.StopAll(procs, syscall.SIGTERM, grace, func(p *agentproc.Proc) {
		for _, c := range s.children {
			if c.proc == p {
				s.errOut.printf("[dev] %s (pid %d) did not stop within %v; killing it\n", c.node.id, c.pid, grace)
			}
		}
	})
}

// lockedWriter writes to w under mu, shared with the lineWriters of the
// children so that lines from different sources never interleave.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
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
