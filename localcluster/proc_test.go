package localcluster

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorate/quorate/internal/await"
)

// modeEnv makes the test binary a stand-in agent: "term" exits 0 on
// SIGTERM, "stubborn" ignores it.
const modeEnv = "LOCALCLUSTER_TEST_MODE"

func TestMain(m *testing.M) {
	switch os.Getenv(modeEnv) {
	case "term":
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		fmt.Println("up")
		<-ch
		fmt.Println("bye")
		os.Exit(0)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		fmt.Println("up")
		// Stands for an agent that never stops on SIGTERM: the test kills it.
		time.Sleep(time.Minute)
		os.Exit(0)
	case "agent":
		fakeAgent()
	}
	goleak.VerifyTestMain(m)
}

// start runs the test binary as a stand-in agent (GORACE: under the race
// detector a child would otherwise sleep a second before exiting).
func start(t *testing.T, mode string, out *Log, onExit func()) *Proc {
	t.Helper()
	p, err := StartProc(os.Args[0], []string{"-test.run=^$"}, ProcOptions{Stdout: out, Stderr: out, Env: []string{modeEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"}, Detach: true, OnExit: onExit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(syscall.SIGKILL, 5*time.Second) })
	await.Until(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "up") {
			return fmt.Errorf("%s child did not come up (running %v): %q", mode, p.Running(), out.String())
		}
		return nil
	})
	return p
}

func TestStopAll(t *testing.T) {
	var out1, out2 Log
	exited := make(chan string, 2)
	polite := start(t, "term", &out1, func() { exited <- "polite" })
	stubborn := start(t, "stubborn", &out2, func() { exited <- "stubborn" })

	var told []*Proc
	killed := StopAll([]*Proc{polite, stubborn}, syscall.SIGTERM, time.Second, func(p *Proc) { told = append(told, p) })
	if !killed || len(told) != 1 || told[0] != stubborn {
		t.Errorf("killed %v, told of %d; want only the stubborn one killed", killed, len(told))
	}
	if polite.Running() || stubborn.Running() {
		t.Fatal("a process still runs after StopAll")
	}
	if polite.Exit() != "exit status 0" || stubborn.Exit() != "signal: killed" {
		t.Errorf("exits %q, %q", polite.Exit(), stubborn.Exit())
	}
	if !strings.Contains(out1.String(), "bye") {
		t.Errorf("the polite child's output after SIGTERM was lost: %q", out1.String())
	}
	if len(exited) != 2 {
		t.Errorf("OnExit ran %d times, want 2", len(exited))
	}
	if err := polite.Signal(syscall.SIGTERM); err != ErrExited {
		t.Errorf("signal to an exited process: %v", err)
	}
}

func TestProbe(t *testing.T) {
	code := http.StatusServiceUnavailable
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(code)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	if ok, why := Probe(ctx, srv.Client(), addr); ok || why != "503 Service Unavailable" {
		t.Errorf("Probe = %v, %q while /readyz answers 503", ok, why)
	}
	mu.Lock()
	code = http.StatusOK
	mu.Unlock()
	if ok, _ := Probe(ctx, srv.Client(), addr); !ok {
		t.Error("not ready while /readyz answers 200")
	}
	srv.Close()
	if ok, why := Probe(ctx, http.DefaultClient, addr); ok || !strings.Contains(why, "connection refused") {
		t.Errorf("Probe = %v, %q with nothing listening", ok, why)
	}
}

func TestLogKeepsTheEnd(t *testing.T) {
	tail, all := &Log{Max: 20}, &Log{}
	for i := range 10 {
		line := []byte(strings.Repeat(string(rune('a'+i)), 5) + "\n")
		tail.Write(line)
		all.Write(line)
	}
	got := tail.String()
	if len(got) > 20 || !strings.HasSuffix(got, "jjjjj\n") || !strings.HasPrefix(got, "h") {
		t.Errorf("tail %q; want the last whole lines within 20 bytes", got)
	}
	if len(all.String()) != 60 {
		t.Errorf("Max 0 kept %d of 60 bytes", len(all.String()))
	}
}
