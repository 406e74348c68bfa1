package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/localcluster"
	"github.com/quorate/quorate/security"
)

func TestDevPlan(t *testing.T) {
	f := devFlags{nodes: 3, dataDir: "data", baseRPC: 7401, baseHTTP: 7501, baseGossip: 7301, basePeer: 7601, shards: 16, logLevel: "info"}
	nodes, err := f.plan()
	if err != nil {
		t.Fatal(err)
	}
	want := []localcluster.Node{
		{ID: "n1", RPC: "127.0.0.1:7401", HTTP: "127.0.0.1:7501", Gossip: "127.0.0.1:7301", Peer: "127.0.0.1:7601", Data: filepath.Join("data", "n1")},
		{ID: "n2", RPC: "127.0.0.1:7402", HTTP: "127.0.0.1:7502", Gossip: "127.0.0.1:7302", Peer: "127.0.0.1:7602", Data: filepath.Join("data", "n2")},
		{ID: "n3", RPC: "127.0.0.1:7403", HTTP: "127.0.0.1:7503", Gossip: "127.0.0.1:7303", Peer: "127.0.0.1:7603", Data: filepath.Join("data", "n3")},
	}
	if !reflect.DeepEqual(nodes, want) {
		t.Errorf("plan = %+v; want %+v", nodes, want)
	}

	bad := []struct {
		name string
		mod  func(*devFlags)
		want string
	}{
		{"no nodes", func(f *devFlags) { f.nodes = 0 }, "--nodes 0"},
		{"negative shards", func(f *devFlags) { f.shards = -1 }, "--shards -1: must not be negative"},
		{"no data", func(f *devFlags) { f.dataDir = "" }, "--data"},
		{"port zero", func(f *devFlags) { f.baseHTTP = 0 }, "--base-http 0"},
		{"past 65535", func(f *devFlags) { f.baseGossip = 65534 }, "--base-gossip 65534: ports 65534..65536"},
		// 7401..7403 and 7403..7405 share 7403.
		{"overlap", func(f *devFlags) { f.baseHTTP = 7403 }, "--base-http 7403: port 7403 is also in the --base-rpc range"},
		{"peer overlap", func(f *devFlags) { f.basePeer = 7502 }, "--base-peer 7502: port 7502 is also in the --base-http range"},
	}
	for _, tt := range bad {
		g := f
		tt.mod(&g)
		if _, err := g.plan(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: plan() = %v; want an error containing %q", tt.name, err, tt.want)
		}
	}
}

// TestDevAgentArgs feeds each node's command line to the agent command:
// what dev starts must parse, and join every other node.
// agentConfigs plans f's nodes and parses each node's agent command line
// as the agent would, returning the configs it would run with.
func agentConfigs(t *testing.T, f devFlags) ([]localcluster.Node, []cluster.Config) {
	t.Helper()
	nodes, err := f.plan()
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []cluster.Config
	for i, n := range nodes {
		r := runCLI(t, f.layout(nodes).Args(i)...)
		if r.code != 0 || len(r.configs) != 1 {
			t.Fatalf("%s: exit %d, stderr %q", n.ID, r.code, r.stderr)
		}
		cfgs = append(cfgs, r.configs[0])
	}
	return nodes, cfgs
}

func TestDevAgentArgs(t *testing.T) {
	f := devFlags{nodes: 3, dataDir: "data", baseRPC: 7401, baseHTTP: 7501, baseGossip: 7301, basePeer: 7601, shards: 8, logLevel: "debug"}
	nodes, cfgs := agentConfigs(t, f)
	for i, n := range nodes {
		cfg := cfgs[i]
		var others []string
		for _, o := range nodes {
			if o.ID != n.ID {
				others = append(others, o.Gossip)
			}
		}
		if cfg.NodeID != n.ID || cfg.DataDir != n.Data || cfg.RPCAddr != n.RPC || cfg.HTTPAddr != n.HTTP ||
			cfg.GossipAddr != n.Gossip || !reflect.DeepEqual(cfg.Join, others) ||
			cfg.BootstrapExpect != 3 || cfg.Shards != 8 || cfg.Replicas != 3 || cfg.PeerAddr != n.Peer ||
			cfg.Security.TLSCert != filepath.Join("data", "credentials", n.ID+".crt") ||
			cfg.Security.TokensFile != filepath.Join("data", "credentials", "tokens") ||
			cfg.Security.GossipKeyring != filepath.Join("data", "credentials", "gossip.keyring") {
			t.Errorf("%s: config %+v", n.ID, cfg)
		}
	}

	// One node: no --join, one replica.
	f.nodes = 1
	nodes, _ = f.plan()
	r := runCLI(t, f.layout(nodes).Args(0)...)
	if r.code != 0 || r.configs[0].Join != nil || r.configs[0].Replicas != 1 || r.configs[0].BootstrapExpect != 1 {
		t.Errorf("one node: exit %d, configs %+v", r.code, r.configs)
	}
}

func freeNode(t *testing.T, id string) localcluster.Node {
	t.Helper()
	n, err := localcluster.FreeNode(t.TempDir(), id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCheckPorts(t *testing.T) {
	if err := checkPorts([]localcluster.Node{freeNode(t, "n1"), freeNode(t, "n2")}); err != nil {
		t.Fatalf("free ports: %v", err)
	}

	// Something already listens on n2's HTTP port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n2 := freeNode(t, "n2")
	n2.HTTP = l.Addr().String()
	err = checkPorts([]localcluster.Node{freeNode(t, "n1"), n2})
	if err == nil {
		t.Fatal("checkPorts with a port in use = nil")
	}
	for _, want := range []string{"ports not available", "tcp " + n2.HTTP + " (n2 --http)", "address already in use", "--base-http"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	// Gossip needs UDP too: a UDP socket alone is a conflict.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	n1 := freeNode(t, "n1")
	n1.Gossip = pc.LocalAddr().String()
	err = checkPorts([]localcluster.Node{n1})
	if err == nil || !strings.Contains(err.Error(), "udp "+n1.Gossip+" (n1 --gossip)") {
		t.Errorf("checkPorts with a UDP port in use = %v", err)
	}
}

func TestDevFailsFastOnPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	data := t.TempDir()
	// Three distinct ones: freed one at a time, the same port could come
	// back twice ("--base-peer: port ... is also in the --base-http range").
	free, err := localcluster.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "dev", "--nodes", "1", "--data", data, "--base-rpc", strconv.Itoa(port),
		"--base-http", strconv.Itoa(free[0]), "--base-gossip", strconv.Itoa(free[1]), "--base-peer", strconv.Itoa(free[2]))
	if r.code != exitFailure || !strings.Contains(r.stderr, l.Addr().String()+" (n1 --rpc)") {
		t.Errorf("exit %d, stderr %q; want 1 naming %s", r.code, r.stderr, l.Addr())
	}
	if entries, _ := os.ReadDir(data); len(entries) != 0 {
		t.Errorf("dev created %v before failing", entries)
	}
}

func TestLineWriter(t *testing.T) {
	var mu sync.Mutex
	var b strings.Builder
	w := &lineWriter{mu: &mu, w: &b, prefix: "[n1] "}
	for _, s := range []string{"one\ntw", "o\n", "", "three\nfour\nfi", "ve"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	w.flush()
	w.flush()
	want := "[n1] one\n[n1] two\n[n1] three\n[n1] four\n[n1] five\n"
	if b.String() != want {
		t.Errorf("got %q; want %q", b.String(), want)
	}

	// A line longer than maxLine is not held back forever.
	b.Reset()
	w.Write([]byte(strings.Repeat("x", maxLine+1)))
	if !strings.HasPrefix(b.String(), "[n1] xxx") {
		t.Errorf("long line held back: %d bytes written", b.Len())
	}
}

// noRaceExitSleep stops a child built with -race from sleeping a second
// before it exits (the race runtime's default), which would count against
// the stop grace period.
const noRaceExitSleep = "GORACE=atexit_sleep_ms=0"

// testDev starts one child of the test binary per mode as dev's cluster
// does, their output prefixed into one buffer.
func testDev(t *testing.T, modes ...string) (*localcluster.Cluster, *syncBuffer, *lockedWriter) {
	t.Helper()
	var mu sync.Mutex
	var out syncBuffer
	errOut := &lockedWriter{mu: &mu, w: &out}
	var layout localcluster.Layout
	for i := range modes {
		layout.Nodes = append(layout.Nodes, freeNode(t, "n"+strconv.Itoa(i+1)))
	}
	c := devCluster(os.Args[0], layout, nil, &mu, &out, &out)
	t.Cleanup(func() { devStop(c, time.Second, errOut) })
	for i, mode := range modes {
		// The mode is read from the environment the child inherits.
		t.Setenv(childModeEnv, mode)
		t.Setenv("GORACE", strings.TrimPrefix(noRaceExitSleep, "GORACE="))
		if err := c.Start(i); err != nil {
			t.Fatal(err)
		}
	}
	return c, &out, errOut
}

func TestDevStop(t *testing.T) {
	c, out, errOut := testDev(t, "serve", "stubborn")
	await.True(t, 10*time.Second, "both children to start", func() bool {
		s := out.String()
		return strings.Contains(s, "[n1] hello err") && strings.Contains(s, "[n2] ready")
	})

	start := time.Now()
	devStop(c, 300*time.Millisecond, errOut)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %v", d)
	}
	if c.Running(0) || c.Running(1) {
		t.Fatal("a child still runs after stop")
	}
	if got := c.Exit(0); got != "exit status 0" {
		t.Errorf("n1 (stops on SIGTERM) exited with %q", got)
	}
	if got := c.Exit(1); got != "signal: killed" {
		t.Errorf("n2 (ignores SIGTERM) exited with %q", got)
	}
	s := out.String()
	for _, want := range []string{"[n1] hello out\n", "[n1] hello err\n", "[n1] partial\n", "[n1] bye\n", "n2 (pid ", "did not stop within 300ms; killing it"} {
		if !strings.Contains(s, want) {
			t.Errorf("output does not contain %q:\n%s", want, s)
		}
	}
}

// twoNodeDev lays out a two-node dev cluster whose nodes are the test
// binary playing mode, and an app writing to out and errOut.
func twoNodeDev(t *testing.T, mode string) (f devFlags, nodes []localcluster.Node, a *app, out, errOut *syncBuffer) {
	t.Helper()
	t.Setenv(childModeEnv, mode)
	t.Setenv("GORACE", strings.TrimPrefix(noRaceExitSleep, "GORACE="))
	f = devFlags{nodes: 2, dataDir: t.TempDir(), shards: 4, logLevel: "info"}
	nodes = []localcluster.Node{freeNode(t, "n1"), freeNode(t, "n2")}
	for i := range nodes {
		nodes[i].Data = filepath.Join(f.dataDir, nodes[i].ID)
	}
	out, errOut = &syncBuffer{}, &syncBuffer{}
	return f, nodes, &app{stdout: out, stderr: errOut}, out, errOut
}

// A node that exits before the cluster is ready stops dev, pointing at its
// output.
func TestDevNodeExitsBeforeReady(t *testing.T) {
	f, nodes, a, out, _ := twoNodeDev(t, "crash")
	err := a.runDev(context.Background(), devRun{exe: os.Args[0], self: "quorate", layout: f.layout(nodes)})
	if err == nil || !regexp.MustCompile(`dev: n[12] exited before the cluster was ready \(exit status 3\); see its \[n[12]\] output above`).MatchString(err.Error()) {
		t.Errorf("runDev = %v", err)
	}
	if !strings.Contains(out.String(), "[n1] crashing\n") {
		t.Errorf("output %q", out.String())
	}
}

// TestRunDev runs a two-node dev cluster of fake agents (the test binary in
// fake-agent mode): it waits for /readyz, prints the table, reports a node
// that dies while the other keeps running, and stops the rest on cancel.
func TestRunDev(t *testing.T) {
	f, nodes, a, out, errOut := twoNodeDev(t, "fake-agent")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	// A pipe with room, as a terminal has: typing never waits for dev.
	stdin, typed, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	defer typed.Close()
	a.stdin = stdin
	go func() { done <- a.runDev(ctx, devRun{exe: os.Args[0], self: "./bin/quorate", layout: f.layout(nodes)}) }()

	await.True(t, 10*time.Second, "the ready banner", func() bool { return strings.Contains(out.String(), "Ctrl-C stops the cluster") })
	s := out.String()
	for _, want := range []string{
		"quorate dev: 2 nodes ready",
		"NODE  RPC",
		"n2    " + nodes[1].RPC + "  " + nodes[1].HTTP + "  " + nodes[1].Gossip + "  " + nodes[1].Peer,
		"export QUORATE_CA=" + filepath.Join(f.dataDir, "credentials", "ca.crt"),
		"export QUORATE_TOKEN=qrt_",
		"\n  ./bin/quorate check --addr " + nodes[0].RPC + " --name api --key user:42 --algorithm token_bucket --limit 100 --period 1m",
		"\n  ./bin/quorate status --addr " + nodes[0].RPC,
		"\n  ./bin/quorate tail --addr " + nodes[0].RPC + " --decision DENY",
		"\n  http://" + nodes[0].HTTP + "/ui/?token=" + readToken(t, filepath.Join(f.dataDir, "credentials")),
		`Type "restart n2" here to bring a`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("stdout does not contain %q:\n%s", want, s)
		}
	}
	if !strings.Contains(errOut.String(), "[n1] fake agent up: agent --node-id n1") {
		t.Errorf("stderr lacks n1's prefixed output:\n%s", errOut.String())
	}
	for _, n := range nodes {
		if st, err := os.Stat(n.Data); err != nil || !st.IsDir() {
			t.Errorf("data dir of %s: %v", n.ID, err)
		}
	}

	// n2 dies: reported, n1 keeps running.
	resp, err := http.Get("http://" + nodes[1].HTTP + "/exit")
	if err == nil {
		resp.Body.Close()
	}
	await.True(t, 10*time.Second, "n2's exit to be reported", func() bool {
		return strings.Contains(errOut.String(), "[dev] n2 (pid ")
	})
	if !strings.Contains(errOut.String(), "exited unexpectedly: exit status 3; 1 of 2 nodes still running") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	if ok, why := localcluster.Probe(context.Background(), hc, nodes[0].HTTP); !ok {
		t.Errorf("n1 not ready after n2 died: %s", why)
	}

	// Typed at dev's terminal: n2 comes back.
	if _, err := typed.WriteString("start n2\n"); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "n2 to be ready again", func() bool {
		return strings.Contains(errOut.String(), "[dev] n2 ready after ")
	})
	if ok, why := localcluster.Probe(context.Background(), hc, nodes[1].HTTP); !ok {
		t.Errorf("n2 not ready after start n2: %s", why)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("runDev = %v; want nil after cancel", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("runDev did not return after cancel")
	}
	for _, want := range []string{"[n1] fake agent stopping", "[dev] cluster stopped"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not contain %q:\n%s", want, errOut.String())
		}
	}
	if ok, _ := localcluster.Probe(context.Background(), hc, nodes[0].HTTP); ok {
		t.Error("n1 still answers after the cluster stopped")
	}
}

// Arguments after "--" reach every agent; ones the agent would reject, or
// that fight dev's own per-node flags, stop dev before anything starts.
func TestDevPassesAgentArgs(t *testing.T) {
	f := devFlags{nodes: 3, dataDir: "data", baseRPC: 7401, baseHTTP: 7501, baseGossip: 7301, basePeer: 7601, shards: 8, logLevel: "info",
		agent: []string{"--lease-ttl", "30s", "--lease-acquire-wait=50ms", "--replicas", "1"}}
	nodes, cfgs := agentConfigs(t, f)
	for i, n := range nodes {
		if c := cfgs[i]; c.LeaseTTL != 30*time.Second || c.LeaseAcquireWait != 50*time.Millisecond || c.Replicas != 1 || c.NodeID != n.ID {
			t.Errorf("%s: lease TTL %v, acquire wait %v, replicas %d, id %s; want 30s, 50ms, 1 (overriding dev's 3), %s",
				n.ID, c.LeaseTTL, c.LeaseAcquireWait, c.Replicas, c.NodeID, n.ID)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dev", "--", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"dev", "--", "--lease-ttl", "soon"}, `invalid argument "soon"`},
		{[]string{"dev", "--", "--rpc", "127.0.0.1:1"}, "--rpc is set by dev for each node; use dev's --base-rpc"},
		{[]string{"dev", "--", "--join=127.0.0.1:2"}, "--join is set by dev for each node"},
		{[]string{"dev", "--", "--tls-cert", "x.crt"}, "--tls-cert is set by dev for each node"},
		{[]string{"dev", "--", "--peer", "127.0.0.1:3"}, "--peer is set by dev for each node; use dev's --base-peer"},
		{[]string{"dev", "--", "--lease-ttl", "1s", "extra"}, `unexpected argument "extra"`},
		// Values the agent's own checks refuse, caught before any node starts.
		{[]string{"dev", "--", "--lease-ttl", "1s", "--lease-renew-interval", "1s"}, "at least twice --lease-renew-interval"},
		{[]string{"dev", "--", "--check-timeout", "-1s"}, "--check-timeout -1s: must be positive"},
		{[]string{"dev", "--", "--help"}, "run quorate agent --help"},
		{[]string{"dev", "stray"}, `unexpected argument "stray": agent flags go after "--"`},
	} {
		data := t.TempDir()
		r := runCLI(t, append(c.args[:1:1], append([]string{"--data", data}, c.args[1:]...)...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, r.code, r.stderr, exitUsage, c.want)
		}
		if entries, _ := os.ReadDir(data); len(entries) != 0 {
			t.Errorf("%q: dev created %v before failing", c.args, entries)
		}
	}
}

// The commands dev prints run as the user ran dev.
func TestInvokedAs(t *testing.T) {
	for _, c := range []struct{ arg0, wd, want string }{
		{"quorate", "/src/quorate", "quorate"},                        // found on the PATH
		{"/src/quorate/bin/quorate", "/src/quorate", "./bin/quorate"}, // make run
		{"./bin/quorate", "/src/quorate", "./bin/quorate"},
		{"bin/quorate", "/src/quorate", "./bin/quorate"},
		{"../quorate/bin/quorate", "/src/other", "/src/quorate/bin/quorate"},
		{"/usr/local/bin/quorate", "/src/quorate", "/usr/local/bin/quorate"},
		{"/home/me/my tools/quorate", "/src", "'/home/me/my tools/quorate'"},
	} {
		if got := invokedAs(c.arg0, c.wd); got != c.want {
			t.Errorf("invokedAs(%q, %q) = %q; want %q", c.arg0, c.wd, got, c.want)
		}
	}
}

// readToken is the dev credentials' read token in dir.
func readToken(t *testing.T, dir string) string {
	t.Helper()
	tok, err := security.Dev{Dir: dir}.Token("prometheus")
	if err != nil || tok == "" {
		t.Fatalf("the read token: %q %v", tok, err)
	}
	return tok
}
