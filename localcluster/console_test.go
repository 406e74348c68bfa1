package localcluster

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/internal/await"
)

// consoleOut is a Console's output, safe for the test to read meanwhile.
type consoleOut struct {
	mu sync.Mutex
	b  strings.Builder
}

func (o *consoleOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *consoleOut) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// TestConsole drives a cluster of fake agents from console commands as a
// user of quorate dev would: a node killed from outside is reported and
// started again on its data, commands stop, kill and restart nodes, and
// mistakes are answered; once the input has ended, the last node exiting
// ends Run.
func TestConsole(t *testing.T) {
	c := fakeCluster(t, "n1", "n2")
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	out := &consoleOut{}
	k := NewConsole(c, out, 2*time.Second)
	lines := make(chan string)
	sigs := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() { done <- k.Run(context.Background(), lines, sigs) }()
	waitFor := func(s string) {
		t.Helper()
		await.True(t, 10*time.Second, "console output "+s, func() bool { return strings.Contains(out.String(), s) })
	}

	pid := c.PID(1)
	_ = syscall.Kill(pid, syscall.SIGKILL) // as a user's kill -9
	waitFor("n2 (pid ")
	waitFor(`exited unexpectedly: signal: killed; 1 of 2 nodes still running (type "start n2" to start it again)`)

	lines <- "start n2"
	waitFor("n2 started (pid ")
	waitFor("n2 ready after ")
	if !c.Running(1) || c.PID(1) == pid || starts(t, c.Node(1)) != 2 {
		t.Fatalf("n2 running %v, pid %d (was %d), %d starts on its data; want a second start", c.Running(1), c.PID(1), pid, starts(t, c.Node(1)))
	}

	lines <- "restart n1"
	waitFor("n1 (pid ")
	waitFor("stopped: exit status 0; 1 of 2 nodes running")
	waitFor("n1 ready after ")

	lines <- "nodes"
	waitFor("NODE  PID")
	lines <- "frobnicate n1"
	waitFor(`unknown command "frobnicate": type help`)
	lines <- "kill n9"
	waitFor(`kill: no node "n9" (nodes: n1, n2)`)
	lines <- "start n1"
	waitFor("n1 is running (pid ")
	lines <- "help"
	waitFor("restart ID...")

	lines <- "kill n1"
	waitFor("stopped: signal: killed; 1 of 2 nodes running")
	sigs <- syscall.SIGUSR1 // what dev makes of SIGUSR1: start all
	await.True(t, 10*time.Second, "n1 started by the signal", func() bool { return strings.Count(out.String(), "n1 ready after ") == 2 })
	if strings.Contains(out.String(), "unexpectedly: exit status") || strings.Count(out.String(), "unexpectedly") != 1 {
		t.Errorf("an exit a command asked for was reported as unexpected:\n%s", out.String())
	}

	close(lines)
	c.Kill(0)
	c.Kill(1)
	select {
	case err := <-done:
		if !errors.Is(err, ErrAllExited) {
			t.Errorf("Run = %v; want ErrAllExited", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run still running with no node and no input:\n%s", out.String())
	}
}

// Lines hands over lines until its reader ends, and gives up on a reader
// that blocks once its context ends.
func TestLines(t *testing.T) {
	var got []string
	for l := range Lines(context.Background(), strings.NewReader("restart n2\n\nhelp")) {
		got = append(got, l)
	}
	if strings.Join(got, "|") != "restart n2||help" {
		t.Errorf("lines %q", got)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	ch := Lines(ctx, r)
	_, _ = w.WriteString("one\n")
	if l := <-ch; l != "one" {
		t.Errorf("line %q", l)
	}
	cancel()
	w.Close() // the blocked read ends too (as a terminal's would when dev exits)
	for range ch {
	}
}
