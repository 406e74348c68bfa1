// Package localcluster starts a cluster of quorate agents as child
// processes on one machine and controls them as a user would, for quorate
// dev, quorate bench --local, the chaos harness and the cluster tests.
//
// A Cluster is laid out from a Layout (addresses, data directories,
// credentials, flags every agent shares). Its nodes can be started, waited
// for until ready, killed (SIGKILL), stopped (SIGTERM), restarted on their
// data, paused and resumed (SIGSTOP, SIGCONT), and joined by more nodes. It
// signals only the processes it started, by PID. Partitions are left to the
// caller: each node has addresses of its own, so a firewall can cut them
// (the chaos harness gives every node its own loopback IP).
package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config describes a Cluster.
type Config struct {
	// Binary is the quorate executable the agents run ("agent" is the
	// first argument of each command line).
	Binary string
	// Layout is the nodes that bootstrap the cluster and the flags every
	// agent gets.
	Layout Layout
	// Env is added to every agent's environment.
	Env []string
	// Output, if set, says where a node's output goes, each time it is
	// started with args; it also goes to the node's Log.
	Output func(id string, args []string) (Output, error)
	// LogMax is how much of a node's latest output its Log keeps, 0 for
	// all of it.
	LogMax int
	// ReadyPoll is how often WaitReady asks each node (default 50ms).
	ReadyPoll time.Duration
}

// Output is where one run of an agent writes.
type Output struct {
	Stdout, Stderr io.Writer
	// OnExit, if set, runs once the process has exited and all its output
	// has been written (to flush or close the writers).
	OnExit func()
}

// Cluster is a set of agents started from one Layout, plus any added since.
// Node indexes are stable: Layout.Nodes first, then added nodes in order.
// Its methods are safe for concurrent use; mu guards every member's fields.
type Cluster struct {
	cfg Config
	hc  *http.Client
	// dir, if set, is a directory Close removes (Launch made it).
	dir string

	mu      sync.Mutex
	members []*member
}

// member is one node and, once started, its process.
type member struct {
	node  Node
	args  []string // its command line, without extra
	extra []string // set by SetExtra: last, for the next start
	proc  *Proc    // nil until started
	log   *Log     // the output of its latest start
	// paused: SIGSTOP sent and no SIGCONT since.
	paused bool
}

// New lays out a cluster; it starts nothing.
func New(cfg Config) *Cluster {
	if cfg.ReadyPoll == 0 {
		cfg.ReadyPoll = 50 * time.Millisecond
	}
	// No keep-alives: a probe leaves no connection (or goroutine) behind.
	c := &Cluster{cfg: cfg, hc: &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	for i, n := range cfg.Layout.Nodes {
		c.members = append(c.members, &member{node: n, args: cfg.Layout.Args(i), log: &Log{Max: cfg.LogMax}})
	}
	return c
}

// Add lays out one more node, n, which joins the nodes of the Layout, with
// extra arguments after the shared ones; it returns n's index. Start
// starts it.
func (c *Cluster) Add(n Node, extra ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	args := append(c.cfg.Layout.JoinArgs(n), extra...)
	c.members = append(c.members, &member{node: n, args: args, log: &Log{Max: c.cfg.LogMax}})
	return len(c.members) - 1
}

func (c *Cluster) member(i int) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i]
}

// Len is the number of nodes, added ones included.
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.members)
}

// All returns every node's index.
func (c *Cluster) All() []int {
	idx := make([]int, c.Len())
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// Node returns node i's identity and addresses.
func (c *Cluster) Node(i int) Node { return c.member(i).node }

// Addrs returns the nodes' gRPC addresses.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.node.RPC
	}
	return out
}

// SetExtra sets arguments that go last on node i's command line from its
// next start on (a clock offset, say); none removes them.
func (c *Cluster) SetExtra(i int, args ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.members[i].extra = slices.Clone(args)
}

// Args is node i's command line (without the binary) at its next start.
func (c *Cluster) Args(i int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	return append(slices.Clone(m.args), m.extra...)
}

// Start starts node i, which must not be running, on its data: the first
// start and every restart. It does not wait for the node to be ready.
func (c *Cluster) Start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if m.running() {
		return fmt.Errorf("localcluster: start of running node %s", m.node.ID)
	}
	args := append(slices.Clone(m.args), m.extra...)
	log := &Log{Max: c.cfg.LogMax}
	o := Output{Stdout: log, Stderr: log}
	if c.cfg.Output != nil {
		out, err := c.cfg.Output(m.node.ID, args)
		if err != nil {
			return fmt.Errorf("localcluster: %s's output: %w", m.node.ID, err)
		}
		o = Output{Stdout: io.MultiWriter(out.Stdout, log), Stderr: io.MultiWriter(out.Stderr, log), OnExit: out.OnExit}
	}
	p, err := StartProc(c.cfg.Binary, args, ProcOptions{Stdout: o.Stdout, Stderr: o.Stderr, Env: c.cfg.Env, Detach: true, OnExit: o.OnExit})
	if err != nil {
		if o.OnExit != nil {
			o.OnExit()
		}
		return fmt.Errorf("localcluster: starting %s: %w", m.node.ID, err)
	}
	m.proc, m.log, m.paused = p, log, false
	return nil
}

// StartAll starts every node not running.
func (c *Cluster) StartAll() error {
	for i := range c.Len() {
		if c.Running(i) {
			continue
		}
		if err := c.Start(i); err != nil {
			return err
		}
	}
	return nil
}

func (m *member) running() bool { return m.proc != nil && m.proc.Running() }

// Running reports whether node i's process is alive (paused counts).
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].running()
}

// Up reports, for every node, whether it is running and not paused.
func (c *Cluster) Up() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bool, len(c.members))
	for i, m := range c.members {
		out[i] = m.running() && !m.paused
	}
	return out
}

// PID is node i's latest process id, 0 if it never started.
func (c *Cluster) PID(i int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.members[i].proc; p != nil {
		return p.PID()
	}
	return 0
}

// Log returns what node i's latest process has written (the last
// Config.LogMax bytes of it).
func (c *Cluster) Log(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].log.String()
}

// Done is closed once node i's latest process has exited; a node never
// started has a closed one.
func (c *Cluster) Done(i int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.members[i].proc; p != nil {
		return p.Done()
	}
	return closed
}

var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Exit says how node i's latest process ended ("exit status 3", "signal:
// killed"), "" while it runs or if it never started.
func (c *Cluster) Exit(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.members[i]; m.proc != nil && !m.running() {
		return m.proc.Exit()
	}
	return ""
}

// Kill sends SIGKILL to node i, if it runs, and waits for it to exit.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	m := c.members[i]
	if !m.running() {
		c.mu.Unlock()
		return
	}
	_ = m.proc.Signal(syscall.SIGKILL)
	done := m.proc.Done()
	m.paused = false
	c.mu.Unlock()
	<-done
}

// Stop sends SIGTERM to node i, if it runs, and waits up to grace for it to
// exit, then kills it. It reports whether the kill was needed.
func (c *Cluster) Stop(i int, grace time.Duration) (killed bool) {
	return c.StopAll(grace, nil, i)
}

// StopAll sends SIGTERM to the nodes idx (every node if none is given)
// that run, and waits for all of them, killing those still running once
// grace (shared by all) is over; onKill, if set, is told of each before it
// is killed. It reports whether any was killed.
func (c *Cluster) StopAll(grace time.Duration, onKill func(i int), idx ...int) (killed bool) {
	if len(idx) == 0 {
		idx = c.All()
	}
	c.mu.Lock()
	var procs []*Proc
	at := map[*Proc]int{}
	for _, i := range idx {
		if p := c.members[i].proc; p != nil {
			procs = append(procs, p)
			at[p] = i
		}
	}
	c.mu.Unlock()
	// A paused agent cannot act on SIGTERM: wake it first.
	for _, p := range procs {
		_ = p.Signal(syscall.SIGCONT)
	}
	var tell func(*Proc)
	if onKill != nil {
		tell = func(p *Proc) { onKill(at[p]) }
	}
	killed = StopAll(procs, syscall.SIGTERM, grace, tell)
	c.mu.Lock()
	for _, i := range idx {
		c.members[i].paused = false
	}
	c.mu.Unlock()
	return killed
}

// KillAll kills every node that runs and waits for all of them.
func (c *Cluster) KillAll() {
	var wg sync.WaitGroup
	for i := range c.Len() {
		wg.Go(func() { c.Kill(i) })
	}
	wg.Wait()
}

// Pause sends SIGSTOP to node i; Resume sends SIGCONT.
func (c *Cluster) Pause(i int) error  { return c.signal(i, syscall.SIGSTOP, true) }
func (c *Cluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT, false) }

func (c *Cluster) signal(i int, sig syscall.Signal, paused bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.members[i]
	if !m.running() {
		return fmt.Errorf("localcluster: %s is not running", m.node.ID)
	}
	if err := m.proc.Signal(sig); err != nil {
		return fmt.Errorf("localcluster: %s to %s: %w", sig, m.node.ID, err)
	}
	m.paused = paused
	return nil
}

// Ready asks node i's /readyz once: whether it answers 200 and, if not, why.
func (c *Cluster) Ready(ctx context.Context, i int) (bool, string) {
	return Probe(ctx, c.hc, c.Node(i).HTTP)
}

// ExitedError is WaitReady's error for a node that exited (or never
// started) before it was ready.
type ExitedError struct {
	ID   string
	Exit string // how it ended ("exit status 3"); "not started"
	Log  string // the end of its output
}

func (e *ExitedError) Error() string {
	s := fmt.Sprintf("localcluster: %s exited before the cluster was ready (%s)", e.ID, e.Exit)
	if e.Log != "" {
		s += "; its log:\n" + e.Log
	}
	return s
}

// NotReadyError is WaitReady's error for nodes still not ready at the
// timeout.
type NotReadyError struct {
	Timeout time.Duration
	// Nodes are the indexes of the nodes not ready; Why says why each is
	// not, as its /readyz answered ("503 Service Unavailable",
	// "connection refused").
	Nodes []int
	IDs   []string
	Why   []string
}

func (e *NotReadyError) Error() string {
	var lines []string
	for k, id := range e.IDs {
		lines = append(lines, fmt.Sprintf("  %s: %s", id, e.Why[k]))
	}
	return fmt.Sprintf("localcluster: not ready after %v (GET /readyz):\n%s", e.Timeout, strings.Join(lines, "\n"))
}

// WaitReady waits until the nodes idx (every node if none is given) answer
// /readyz with 200. It fails with an *ExitedError as soon as one of them is
// not running, with a *NotReadyError after timeout, and with ctx's error if
// ctx ends first.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration, idx ...int) error {
	if len(idx) == 0 {
		idx = c.All()
	}
	deadline := time.Now().Add(timeout)
	ready := make([]bool, len(idx))
	why := make([]string, len(idx))
	for {
		left := 0
		for k, i := range idx {
			if !c.Running(i) {
				e := &ExitedError{ID: c.Node(i).ID, Exit: c.Exit(i), Log: c.Log(i)}
				if c.PID(i) == 0 {
					e.Exit = "not started"
				}
				return e
			}
			if !ready[k] {
				ready[k], why[k] = c.Ready(ctx, i)
			}
			if !ready[k] {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			e := &NotReadyError{Timeout: timeout}
			for k, i := range idx {
				if !ready[k] {
					e.Nodes, e.IDs, e.Why = append(e.Nodes, i), append(e.IDs, c.Node(i).ID), append(e.Why, why[k])
				}
			}
			return e
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.cfg.ReadyPoll):
		}
	}
}
