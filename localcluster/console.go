package localcluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// ErrAllExited is Console.Run's error when every node has exited and no
// command can start one again (its input has ended).
var ErrAllExited = errors.New("localcluster: every node has exited")

// ConsoleHelp lists the commands a Console takes.
const ConsoleHelp = `commands (ID is a node id such as n2, or all):
  restart ID...   stop (SIGTERM, then SIGKILL after the grace period) and start again on its data
  start ID...     start nodes that are not running
  stop ID...      SIGTERM, then SIGKILL after the grace period
  kill ID...      SIGKILL, as kill -9
  pause ID...     SIGSTOP; resume ID... sends SIGCONT
  nodes           each node's pid and state
  help            this list
`

// Console is quorate dev's control of a running cluster: it reports each
// node that exits, and runs commands (ConsoleHelp) typed at dev's terminal,
// so that a node killed to test a failure can be brought back. Run owns it:
// its fields are read by Run's goroutine and the waiters Run starts, and
// expected is guarded by mu.
type Console struct {
	c     *Cluster
	out   io.Writer // whole lines, with "[dev] " in front
	grace time.Duration
	// readyWait is how long a started node is watched for readiness.
	readyWait time.Duration
	now       func() time.Time

	exits chan exitEvent
	stop  chan struct{} // closed when Run returns: waiters give up

	mu       sync.Mutex
	expected map[int]bool // pids whose exit a command asked for
}

type exitEvent struct{ i, pid int }

// NewConsole returns a console for c writing to out (one Write per line);
// stop and restart give a node grace to exit on SIGTERM.
func NewConsole(c *Cluster, out io.Writer, grace time.Duration) *Console {
	return &Console{c: c, out: out, grace: grace, readyWait: time.Minute, now: time.Now,
		exits: make(chan exitEvent), stop: make(chan struct{}), expected: map[int]bool{}}
}

func (k *Console) printf(format string, args ...any) {
	_, _ = io.WriteString(k.out, "[dev] "+fmt.Sprintf(format, args...)+"\n")
}

// Run reports exits and runs each line of lines as a command, and each
// value from starts as "start all" (a signal), until ctx ends (nil), or
// every node has exited while lines is closed or nil (ErrAllExited). It
// does not stop the cluster.
func (k *Console) Run(ctx context.Context, lines <-chan string, starts <-chan os.Signal) error {
	ctx, cancel := context.WithCancel(ctx) // ends the readiness watches too
	defer cancel()
	defer close(k.stop)
	for i := range k.c.Len() {
		if k.c.Running(i) {
			k.watch(ctx, i, false)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case line, ok := <-lines:
			if !ok {
				lines = nil
				if k.running() == 0 {
					return ErrAllExited
				}
				continue
			}
			k.Do(ctx, line)
		case <-starts:
			k.Do(ctx, "start all")
		case e := <-k.exits:
			if k.reportExit(e) && lines == nil {
				return ErrAllExited
			}
		}
	}
}

// reportExit says how node e.i ended, and reports whether none is left.
func (k *Console) reportExit(e exitEvent) (none bool) {
	k.mu.Lock()
	asked := k.expected[e.pid]
	delete(k.expected, e.pid)
	k.mu.Unlock()
	left, id := k.running(), k.c.Node(e.i).ID
	if asked { // the command that asked has said so
		return left == 0
	}
	k.printf("%s (pid %d) exited unexpectedly: %v; %d of %d nodes still running (type \"start %s\" to start it again)",
		id, e.pid, k.c.Exit(e.i), left, k.c.Len(), id)
	if left == 0 {
		k.printf("every node has exited: type \"start all\", or Ctrl-C")
	}
	return left == 0
}

func (k *Console) running() int {
	n := 0
	for i := range k.c.Len() {
		if k.c.Running(i) {
			n++
		}
	}
	return n
}

// watch reports node i's exit to Run; with ready, it also says how long
// the node took to answer /readyz with 200.
func (k *Console) watch(ctx context.Context, i int, ready bool) {
	done, pid := k.c.Done(i), k.c.PID(i)
	go func() {
		select {
		case <-done:
			select {
			case k.exits <- exitEvent{i, pid}:
			case <-k.stop:
			}
		case <-k.stop:
		}
	}()
	if !ready {
		return
	}
	started := k.now()
	go func() {
		err := k.c.WaitReady(ctx, k.readyWait, i)
		var exited *ExitedError
		switch {
		case err == nil:
			k.printf("%s ready after %v", k.c.Node(i).ID, k.now().Sub(started).Round(100*time.Millisecond))
		case errors.As(err, &exited), ctx.Err() != nil:
			// Its exit is reported, or dev is stopping.
		default:
			k.printf("%s: %v", k.c.Node(i).ID, err)
		}
	}()
}

// Do runs one command line, printing what it did.
func (k *Console) Do(ctx context.Context, line string) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return
	}
	cmd, args := strings.ToLower(fields[0]), fields[1:]
	switch cmd {
	case "help", "?":
		_, _ = io.WriteString(k.out, ConsoleHelp)
		return
	case "nodes", "status", "ps":
		k.nodes()
		return
	}
	act, ok := map[string]func(context.Context, int) error{
		"start": k.start, "restart": k.restart, "stop": k.stopNode, "kill": k.kill,
		"pause":  func(_ context.Context, i int) error { return k.c.Pause(i) },
		"resume": func(_ context.Context, i int) error { return k.c.Resume(i) },
	}[cmd]
	if !ok {
		k.printf("unknown command %q: type help", fields[0])
		return
	}
	idx, err := k.ids(args)
	if err != nil {
		k.printf("%s: %v", cmd, err)
		return
	}
	for _, i := range idx {
		if err := act(ctx, i); err != nil {
			k.printf("%s %s: %v", cmd, k.c.Node(i).ID, err)
		}
	}
}

// ids resolves node ids, or "all", to indexes.
func (k *Console) ids(args []string) ([]int, error) {
	if len(args) == 0 {
		return nil, errors.New("which node? (a node id such as n1, or all)")
	}
	var idx []int
	for _, a := range args {
		if a == "all" {
			return k.c.All(), nil
		}
		i := k.index(a)
		if i < 0 {
			return nil, fmt.Errorf("no node %q (nodes: %s)", a, strings.Join(k.idList(), ", "))
		}
		idx = append(idx, i)
	}
	return idx, nil
}

func (k *Console) index(id string) int {
	for i := range k.c.Len() {
		if k.c.Node(i).ID == id {
			return i
		}
	}
	return -1
}

func (k *Console) idList() []string {
	var ids []string
	for i := range k.c.Len() {
		ids = append(ids, k.c.Node(i).ID)
	}
	return ids
}

func (k *Console) start(ctx context.Context, i int) error {
	if k.c.Running(i) {
		k.printf("%s is running (pid %d); restart %s stops it first", k.c.Node(i).ID, k.c.PID(i), k.c.Node(i).ID)
		return nil
	}
	if err := k.c.Start(i); err != nil {
		return err
	}
	k.printf("%s started (pid %d)", k.c.Node(i).ID, k.c.PID(i))
	k.watch(ctx, i, true)
	return nil
}

func (k *Console) restart(ctx context.Context, i int) error {
	if err := k.stopNode(ctx, i); err != nil {
		return err
	}
	return k.start(ctx, i)
}

func (k *Console) stopNode(_ context.Context, i int) error {
	if pid := k.expect(i); pid != 0 {
		killed := k.c.Stop(i, k.grace)
		k.stopped(i, pid, killed)
	}
	return nil
}

func (k *Console) kill(_ context.Context, i int) error {
	if pid := k.expect(i); pid != 0 {
		k.c.Kill(i)
		k.stopped(i, pid, false)
	}
	return nil
}

func (k *Console) stopped(i, pid int, killed bool) {
	how := k.c.Exit(i)
	if killed {
		how += fmt.Sprintf(", still running %v after SIGTERM", k.grace)
	}
	k.printf("%s (pid %d) stopped: %s; %d of %d nodes running", k.c.Node(i).ID, pid, how, k.running(), k.c.Len())
}

// expect marks node i's coming exit as asked for and returns its pid; 0 if
// it is not running.
func (k *Console) expect(i int) int {
	if !k.c.Running(i) {
		return 0
	}
	pid := k.c.PID(i)
	k.mu.Lock()
	k.expected[pid] = true
	k.mu.Unlock()
	return pid
}

// nodes prints each node's pid and state.
func (k *Console) nodes() {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPID\tSTATE")
	up := k.c.Up()
	for i := range k.c.Len() {
		state := "running"
		switch {
		case !k.c.Running(i):
			state = "exited: " + k.c.Exit(i)
		case !up[i]:
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\n", k.c.Node(i).ID, k.c.PID(i), state)
	}
	tw.Flush()
	_, _ = io.WriteString(k.out, b.String())
}

// Lines sends each line read from r until it ends or ctx does; the channel
// holds a few lines. A read blocked on r (a terminal) is left behind when
// ctx ends, so that it never holds up a shutdown.
func Lines(ctx context.Context, r io.Reader) <-chan string {
	ch := make(chan string, 8)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r) // lines up to 64 KiB; a longer one ends the input
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}
