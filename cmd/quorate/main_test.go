package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster"
)

// childModeEnv makes the test binary play a child process for the dev
// tests instead of running tests; see childMain.
const childModeEnv = "QUORATE_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(childMain(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// childMain is a stand-in for an agent process:
//
//   - serve: says hello on stdout and stderr, then exits 0 on SIGTERM.
//   - stubborn: ignores SIGTERM until it is killed.
//   - crash: exits with status 3 at once.
//   - fake-agent: serves GET /readyz (200) and /exit (exits 3) on the
//     address after --http in args, and exits 0 on SIGTERM.
//   - main: the quorate binary itself, for commands that start this one
//     (quorate bench --baseline noop starts os.Executable() noop-server).
func childMain(mode string, args []string) int {
	switch mode {
	case "main":
		return newApp().run(context.Background(), args)
	case "serve":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("hello out")
		fmt.Fprint(os.Stderr, "hello err\npartial")
		<-ch
		fmt.Println("bye")
		return 0
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("ready")
		time.Sleep(time.Minute) // a child that never stops by itself: the test kills it
		return 0
	case "crash":
		fmt.Println("crashing")
		return 3
	case "fake-agent":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		addr := ""
		for i, a := range args {
			if a == "--http" && i+1 < len(args) {
				addr = args[i+1]
			}
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /readyz", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("GET /exit", func(http.ResponseWriter, *http.Request) { os.Exit(3) })
		go func() {
			fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, mux))
			os.Exit(4)
		}()
		fmt.Fprintln(os.Stderr, "fake agent up:", strings.Join(args, " "))
		<-ch
		fmt.Fprintln(os.Stderr, "fake agent stopping")
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown child mode", mode)
	return 99
}

// syncBuffer is a bytes.Buffer safe for the concurrent writers of a test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// result is what one run of the binary produced.
type result struct {
	code           int
	stdout, stderr string
	// configs are the configs the agent command passed to cluster.Run.
	configs []cluster.Config
}

// runCLI runs the binary's command line args in process, with cluster.Run
// replaced by a recorder that returns at once.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut syncBuffer
	var r result
	a := &app{stdout: &out, stderr: &errOut, runNode: func(_ context.Context, cfg cluster.Config) error {
		r.configs = append(r.configs, cfg)
		return nil
	}}
	r.code = a.run(context.Background(), args)
	r.stdout, r.stderr = out.String(), errOut.String()
	return r
}

func TestUnknownCommandAndVersion(t *testing.T) {
	r := runCLI(t, "frobnicate")
	if r.code != exitUsage || !strings.Contains(r.stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: code %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "quorate ") {
		t.Errorf("version: code %d, stdout %q", r.code, r.stdout)
	}
	r = runCLI(t, "version", "extra")
	if r.code != exitUsage {
		t.Errorf("version with an argument: code %d; want %d", r.code, exitUsage)
	}
}

// TestTopFlagErrors: quorate top refuses bad flags before it dials,
// naming the flag.
func TestTopFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--by", "most"}, `--by "most": want denied or hits`},
		{[]string{"--window", "2m"}, "--window 2m0s: want 1m, 5m, 15m or 1h"},
		{[]string{"--limit", "0"}, "--limit 0: want 1 to 100"},
		{[]string{"--limit", "101"}, "--limit 101"},
	} {
		r := runCLI(t, append([]string{"top", "--addr", "127.0.0.1:1"}, tt.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("top %v: exit %d, stderr %q; want %d and %q", tt.args, r.code, r.stderr, exitUsage, tt.want)
		}
	}
}
