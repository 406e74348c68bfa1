package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/internal/await"
)

// fakeAgent plays quorate agent from the command line it is given: it
// serves /readyz on --http and counts its starts in --data. Its --node-id
// picks its behaviour: "never" is never ready, "slow" is ready from its
// third probe, "crash" exits 3 at once, "stubborn" ignores SIGTERM; any
// other stops on SIGTERM, saying "bye".
func fakeAgent() {
	args := os.Args[1:]
	flag := func(name string) string {
		if i := slices.Index(args, "--"+name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	id := flag("node-id")
	fmt.Printf("up %s\n", strings.Join(args, " "))
	if id == "crash" {
		fmt.Fprintln(os.Stderr, "crashing")
		os.Exit(3)
	}
	if err := os.MkdirAll(flag("data"), 0o755); err != nil {
		os.Exit(4)
	}
	f, _ := os.OpenFile(filepath.Join(flag("data"), "starts"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	f.WriteString("start\n")
	f.Close()
	var probes atomic.Int32
	l, err := net.Listen("tcp", flag("http"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(5)
	}
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := probes.Add(1)
		if id == "never" || (id == "slow" && n < 3) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	if id == "stubborn" {
		signal.Ignore(syscall.SIGTERM)
		select {} // until killed
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	fmt.Println("bye")
	os.Exit(0)
}

// fakeCluster lays out a cluster of fake agents with the given ids.
func fakeCluster(t *testing.T, ids ...string) *Cluster {
	t.Helper()
	t.Setenv(modeEnv, "agent") // inherited by the children
	dir := t.TempDir()
	var l Layout
	for _, id := range ids {
		n, err := FreeNode(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		l.Nodes = append(l.Nodes, n)
	}
	c := New(Config{Binary: os.Args[0], Layout: l, Env: []string{"GORACE=atexit_sleep_ms=0"}, ReadyPoll: 10 * time.Millisecond})
	t.Cleanup(func() { c.StopAll(time.Second, nil) })
	return c
}

func starts(t *testing.T, n Node) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.Data, "starts"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "start\n")
}

// TestClusterLifecycle drives fake agents through what a tester does to a
// cluster: start, kill -9, restart on the same data, pause, resume, add a
// node, stop.
func TestClusterLifecycle(t *testing.T) {
	c := fakeCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Log(0), "up agent --node-id n1") || !strings.Contains(c.Log(0), "--join "+c.Node(1).Gossip+","+c.Node(2).Gossip) {
		t.Errorf("n1's log %q lacks its command line", c.Log(0))
	}

	pid := c.PID(1)
	c.Kill(1)
	if c.Running(1) || c.Exit(1) != "signal: killed" || !slices.Equal(c.Up(), []bool{true, false, true}) {
		t.Fatalf("after kill: running %v, exit %q, up %v", c.Running(1), c.Exit(1), c.Up())
	}
	if err := c.WaitReady(ctx, 10*time.Second, 1); !errors.As(err, new(*ExitedError)) {
		t.Errorf("WaitReady of a killed node = %v; want an ExitedError", err)
	}
	if err := c.Start(1); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(1); err == nil {
		t.Error("a second start of a running node did not fail")
	}
	if err := c.WaitReady(ctx, 10*time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if c.PID(1) == pid || starts(t, c.Node(1)) != 2 {
		t.Errorf("restart: pid %d (was %d), %d starts on its data; want a new process on the same data", c.PID(1), pid, starts(t, c.Node(1)))
	}

	if err := c.Pause(0); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Up(), []bool{false, true, true}) {
		t.Errorf("paused n1: up %v", c.Up())
	}
	if err := c.Resume(0); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 10*time.Second, 0); err != nil {
		t.Errorf("resumed n1: %v", err)
	}

	n4, err := FreeNode(t.TempDir(), "n4")
	if err != nil {
		t.Fatal(err)
	}
	i := c.Add(n4, "--log-level", "info")
	c.SetExtra(i, "--debug-clock-offset", "5s")
	args := strings.Join(c.Args(i), " ")
	if i != 3 || !strings.Contains(args, "--join "+strings.Join([]string{c.Node(0).Gossip, c.Node(1).Gossip, c.Node(2).Gossip}, ",")) ||
		strings.Contains(args, "--bootstrap-expect") || !strings.HasSuffix(args, "--log-level info --debug-clock-offset 5s") {
		t.Errorf("added node %d: %s", i, args)
	}
	if err := c.Start(i); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	if killed := c.Stop(2, 10*time.Second); killed || c.Exit(2) != "exit status 0" || !strings.Contains(c.Log(2), "bye") {
		t.Errorf("stop: killed %v, exit %q, log %q", killed, c.Exit(2), c.Log(2))
	}
	if err := c.Pause(2); err == nil || !strings.Contains(err.Error(), "n3 is not running") {
		t.Errorf("pause of a stopped node: %v", err)
	}
}

// StopAll wakes paused nodes so they can stop, and kills those that do not
// stop within the grace, telling the caller which.
func TestClusterStopAll(t *testing.T) {
	c := fakeCluster(t, "n1", "stubborn")
	if err := c.StartAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(context.Background(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(0); err != nil {
		t.Fatal(err)
	}
	var told []int
	if !c.StopAll(300*time.Millisecond, func(i int) { told = append(told, i) }) || !slices.Equal(told, []int{1}) {
		t.Errorf("told of %v; want only the stubborn node killed", told)
	}
	if c.Exit(0) != "exit status 0" || c.Exit(1) != "signal: killed" {
		t.Errorf("exits %q, %q", c.Exit(0), c.Exit(1))
	}
}

func TestWaitReady(t *testing.T) {
	c := fakeCluster(t, "slow", "never", "crash")
	ctx := context.Background()
	for i := range 2 {
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitReady(ctx, 10*time.Second, 0); err != nil {
		t.Errorf("slow node: %v", err)
	}
	var nr *NotReadyError
	err := c.WaitReady(ctx, 200*time.Millisecond, 0, 1)
	if !errors.As(err, &nr) || !slices.Equal(nr.Nodes, []int{1}) || nr.Why[0] != "503 Service Unavailable" ||
		!strings.Contains(err.Error(), "not ready after 200ms (GET /readyz):\n  never: 503 Service Unavailable") {
		t.Errorf("WaitReady with a node never ready = %v", err)
	}

	// A node that exits ends the wait at once, with its output.
	if err := c.Start(2); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var ex *ExitedError
	err = c.WaitReady(ctx, time.Minute, 1, 2)
	if !errors.As(err, &ex) || ex.ID != "crash" || ex.Exit != "exit status 3" || !strings.Contains(ex.Log, "crashing") {
		t.Errorf("WaitReady with a node that exited = %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the wait took %s", d)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.WaitReady(cctx, time.Minute, 1); err != context.Canceled {
		t.Errorf("WaitReady cancelled = %v", err)
	}
}

// Output hooks see each start's command line and get every byte, and the
// node's Log keeps a copy.
func TestOutputHook(t *testing.T) {
	c := fakeCluster(t, "n1")
	var log Log
	var runs atomic.Int32
	c.cfg.Output = func(id string, args []string) (Output, error) {
		fmt.Fprintf(&log, "=== %s start: %s\n", id, strings.Join(args, " "))
		return Output{Stdout: &log, Stderr: &log, OnExit: func() { runs.Add(1) }}, nil
	}
	for range 2 {
		if err := c.Start(0); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitReady(context.Background(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		c.Stop(0, 10*time.Second)
	}
	await.True(t, 10*time.Second, "both runs' output to be closed", func() bool { return runs.Load() == 2 })
	if got := log.String(); strings.Count(got, "=== n1 start: agent --node-id n1") != 2 || strings.Count(got, "bye\n") != 2 {
		t.Errorf("output %q", got)
	}
	if !strings.Contains(c.Log(0), "bye") || strings.Contains(c.Log(0), "===") {
		t.Errorf("Log %q; want the latest run's output alone", c.Log(0))
	}
}
