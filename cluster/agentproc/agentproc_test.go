package agentproc

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// modeEnv makes the test binary a stand-in agent: "term" exits 0 on
// SIGTERM, "stubborn" ignores it.
const modeEnv = "AGENTPROC_TEST_MODE"

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
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func TestArgs(t *testing.T) {
	l := Layout{Shards: 8, LogLevel: "warn", Credentials: "/c", Extra: []string{"--lease-ttl", "30s"}}
	for _, id := range []string{"n1", "n2", "n3"} {
		l.Nodes = append(l.Nodes, Node{ID: id, Data: "/d/" + id, RPC: id + ":1", HTTP: id + ":2", Gossip: id + ":3", Peer: id + ":4"})
	}
	want := []string{"agent", "--node-id", "n2", "--data", "/d/n2", "--rpc", "n2:1", "--peer", "n2:4", "--http", "n2:2", "--gossip", "n2:3",
		"--bootstrap-expect", "3", "--replicas", "3", "--shards", "8", "--log-level", "warn",
		"--join", "n1:3,n3:3",
		"--tls-cert", "/c/n2.crt", "--tls-key", "/c/n2.key", "--tls-ca", "/c/ca.crt",
		"--tokens-file", "/c/tokens", "--gossip-keyring", "/c/gossip.keyring",
		"--lease-ttl", "30s"}
	if got := l.Args(1); !reflect.DeepEqual(got, want) {
		t.Errorf("Args(1) =\n%q\nwant\n%q", got, want)
	}
	// One node: no --join, one replica, the agent's defaults kept.
	one := Layout{Nodes: l.Nodes[:1]}
	want = []string{"agent", "--node-id", "n1", "--data", "/d/n1", "--rpc", "n1:1", "--peer", "n1:4", "--http", "n1:2", "--gossip", "n1:3",
		"--bootstrap-expect", "1", "--replicas", "1"}
	if got := one.Args(0); !reflect.DeepEqual(got, want) {
		t.Errorf("one node: %q", got)
	}
}

// start runs the test binary as a stand-in agent (GORACE: under the race
// detector a child would otherwise sleep a second before exiting).
func start(t *testing.T, mode string, out *Log, onExit func()) *Proc {
	t.Helper()
	p, err := Start(os.Args[0], []string{"-test.run=^$"}, Options{Stdout: out, Stderr: out, Env: []string{modeEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"}, Detach: true, OnExit: onExit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(syscall.SIGKILL, 5*time.Second) })
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "up") {
		if time.Now().After(deadline) || !p.Running() {
			t.Fatalf("%s child did not come up: %q", mode, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
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

func TestReady(t *testing.T) {
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
	if Ready(ctx, srv.Client(), addr) {
		t.Error("ready while /readyz answers 503")
	}
	mu.Lock()
	code = http.StatusOK
	mu.Unlock()
	if !Ready(ctx, srv.Client(), addr) {
		t.Error("not ready while /readyz answers 200")
	}
	srv.Close()
	if Ready(ctx, http.DefaultClient, addr) {
		t.Error("ready with nothing listening")
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
