package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster"
)

func TestDevPlan(t *testing.T) {
	f := devFlags{nodes: 3, dataDir: "data", baseRPC: 7401, baseHTTP: 7501, baseGossip: 7301, basePeer: 7601, shards: 16, logLevel: "info"}
	nodes, err := f.plan()
	if err != nil {
		t.Fatal(err)
	}
	want := []devNode{
		{"n1", "127.0.0.1:7401", "127.0.0.1:7501", "127.0.0.1:7301", "127.0.0.1:7601", filepath.Join("data", "n1")},
		{"n2", "127.0.0.1:7402", "127.0.0.1:7502", "127.0.0.1:7302", "127.0.0.1:7602", filepath.Join("data", "n2")},
		{"n3", "127.0.0.1:7403", "127.0.0.1:7503", "127.0.0.1:7303", "127.0.0.1:7603", filepath.Join("data", "n3")},
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
func agentConfigs(t *testing.T, f devFlags) ([]devNode, []cluster.Config) {
	t.Helper()
	nodes, err := f.plan()
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []cluster.Config
	for _, n := range nodes {
		r := runCLI(t, f.agentArgs(n, nodes)...)
		if r.code != 0 || len(r.configs) != 1 {
			t.Fatalf("%s: exit %d, stderr %q", n.id, r.code, r.stderr)
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
			if o.id != n.id {
				others = append(others, o.gossip)
			}
		}
		if cfg.NodeID != n.id || cfg.DataDir != n.dataDir || cfg.RPCAddr != n.rpc || cfg.HTTPAddr != n.http ||
			cfg.GossipAddr != n.gossip || !reflect.DeepEqual(cfg.Join, others) ||
			cfg.BootstrapExpect != 3 || cfg.Shards != 8 || cfg.Replicas != 3 || cfg.PeerAddr != n.peer ||
			cfg.Security.TLSCert != filepath.Join("data", "credentials", n.id+".crt") ||
			cfg.Security.TokensFile != filepath.Join("data", "credentials", "tokens") ||
			cfg.Security.GossipKeyring != filepath.Join("data", "credentials", "gossip.keyring") {
			t.Errorf("%s: config %+v", n.id, cfg)
		}
	}

	// One node: no --join, one replica.
	f.nodes = 1
	nodes, _ = f.plan()
	r := runCLI(t, f.agentArgs(nodes[0], nodes)...)
	if r.code != 0 || r.configs[0].Join != nil || r.configs[0].Replicas != 1 || r.configs[0].BootstrapExpect != 1 {
		t.Errorf("one node: exit %d, configs %+v", r.code, r.configs)
	}
}

// freePort returns a port nothing listens on (TCP or UDP) at the moment.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if pc, err := net.ListenPacket("udp", loopback(port)); err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

func freeNode(t *testing.T, id string) devNode {
	return devNode{id: id, rpc: loopback(freePort(t)), http: loopback(freePort(t)), gossip: loopback(freePort(t)), peer: loopback(freePort(t)), dataDir: t.TempDir()}
}

func TestCheckPorts(t *testing.T) {
	if err := checkPorts([]devNode{freeNode(t, "n1"), freeNode(t, "n2")}); err != nil {
		t.Fatalf("free ports: %v", err)
	}

	// Something already listens on n2's HTTP port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n2 := freeNode(t, "n2")
	n2.http = l.Addr().String()
	err = checkPorts([]devNode{freeNode(t, "n1"), n2})
	if err == nil {
		t.Fatal("checkPorts with a port in use = nil")
	}
	for _, want := range []string{"ports not available", "tcp " + n2.http + " (n2 --http)", "address already in use", "--base-http"} {
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
	n1.gossip = pc.LocalAddr().String()
	err = checkPorts([]devNode{n1})
	if err == nil || !strings.Contains(err.Error(), "udp "+n1.gossip+" (n1 --gossip)") {
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
	r := runCLI(t, "dev", "--nodes", "1", "--data", data, "--base-rpc", strconv.Itoa(port),
		"--base-http", strconv.Itoa(freePort(t)), "--base-gossip", strconv.Itoa(freePort(t)), "--base-peer", strconv.Itoa(freePort(t)))
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

// testSupervisor starts one child of the test binary per mode.
func testSupervisor(t *testing.T, modes ...string) (*supervisor, *syncBuffer, *sync.Mutex) {
	t.Helper()
	var mu sync.Mutex
	var out syncBuffer
	sup := &supervisor{exits: make(chan *child, len(modes)), errOut: &lockedWriter{mu: &mu, w: &out}}
	for i, mode := range modes {
		n := devNode{id: "n" + strconv.Itoa(i+1)}
		if err := sup.start(n, os.Args[0], nil, []string{childModeEnv + "=" + mode, noRaceExitSleep}, &mu, &out, &out); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { sup.stop(time.Second) })
	return sup, &out, &mu
}

func TestSupervisorStop(t *testing.T) {
	sup, out, _ := testSupervisor(t, "serve", "stubborn")
	waitFor(t, "both children to start", func() bool {
		s := out.String()
		return strings.Contains(s, "[n1] hello err") && strings.Contains(s, "[n2] ready")
	})

	start := time.Now()
	sup.stop(300 * time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stop took %v", d)
	}
	for _, c := range sup.children {
		select {
		case <-c.done:
		default:
			t.Fatalf("%s still running after stop", c.node.id)
		}
	}
	if got := sup.children[0].exitDesc(); got != "exit status 0" {
		t.Errorf("n1 (stops on SIGTERM) exited with %q", got)
	}
	if got := sup.children[1].exitDesc(); got != "signal: killed" {
		t.Errorf("n2 (ignores SIGTERM) exited with %q", got)
	}
	s := out.String()
	for _, want := range []string{"[n1] hello out\n", "[n1] hello err\n", "[n1] partial\n", "[n1] bye\n", "n2 (pid ", "did not stop within 300ms; killing it"} {
		if !strings.Contains(s, want) {
			t.Errorf("output does not contain %q:\n%s", want, s)
		}
	}
}

func TestSupervisorReportsExit(t *testing.T) {
	sup, out, _ := testSupervisor(t, "crash")
	select {
	case c := <-sup.exits:
		if c.node.id != "n1" || c.exitDesc() != "exit status 3" {
			t.Errorf("exit of %s: %s", c.node.id, c.exitDesc())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit reported")
	}
	if !strings.Contains(out.String(), "[n1] crashing\n") {
		t.Errorf("output %q", out.String())
	}
}

func TestWaitReady(t *testing.T) {
	var calls atomic.Int32
	// Ready from the third probe on.
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			t.Errorf("probed %s", r.URL.Path)
		}
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer slow.Close()
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer never.Close()
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	closed := loopback(freePort(t))

	ctx := context.Background()
	exits := make(chan *child, 1)
	nodes := []devNode{{id: "n1", http: host(slow)}}
	if err := waitReady(ctx, nodes, 10*time.Second, 10*time.Millisecond, exits); err != nil {
		t.Errorf("waitReady = %v", err)
	}
	if calls.Load() != 3 {
		t.Errorf("%d probes; want 3", calls.Load())
	}

	nodes = []devNode{{id: "n1", http: host(slow)}, {id: "n2", http: host(never)}, {id: "n3", http: closed}}
	err := waitReady(ctx, nodes, 200*time.Millisecond, 10*time.Millisecond, exits)
	if err == nil {
		t.Fatal("waitReady with unready nodes = nil")
	}
	msg := err.Error()
	for _, want := range []string{"not ready after 200ms", "n2: 503 Service Unavailable", "n3: ", "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Contains(msg, "n1:") {
		t.Errorf("error %q lists the ready n1", msg)
	}

	// A node that exits ends the wait at once.
	sup, _, _ := testSupervisor(t, "crash")
	err = waitReady(ctx, []devNode{{id: "n1", http: host(never)}}, time.Minute, 10*time.Millisecond, sup.exits)
	if err == nil || !strings.Contains(err.Error(), "n1 exited before the cluster was ready (exit status 3)") {
		t.Errorf("waitReady with an exited node = %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := waitReady(cctx, nodes[1:2], time.Minute, 10*time.Millisecond, exits); err != context.Canceled {
		t.Errorf("waitReady cancelled = %v", err)
	}
}

// TestRunDev runs a two-node dev cluster of fake agents (the test binary in
// fake-agent mode): it waits for /readyz, prints the table, reports a node
// that dies while the other keeps running, and stops the rest on cancel.
func TestRunDev(t *testing.T) {
	t.Setenv(childModeEnv, "fake-agent")
	t.Setenv("GORACE", strings.TrimPrefix(noRaceExitSleep, "GORACE="))
	f := devFlags{nodes: 2, dataDir: t.TempDir(), shards: 4, logLevel: "info"}
	nodes := []devNode{freeNode(t, "n1"), freeNode(t, "n2")}
	for i := range nodes {
		nodes[i].dataDir = filepath.Join(f.dataDir, nodes[i].id)
	}
	var out, errOut syncBuffer
	a := &app{stdout: &out, stderr: &errOut}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.runDev(ctx, os.Args[0], nodes, f.agentArgs, "") }()

	waitFor(t, "the ready banner", func() bool { return strings.Contains(out.String(), "Ctrl-C stops the cluster") })
	s := out.String()
	for _, want := range []string{
		"quorate dev: 2 nodes ready",
		"NODE  RPC",
		"n2    " + nodes[1].rpc + "  " + nodes[1].http + "  " + nodes[1].gossip + "  " + nodes[1].peer,
		"export QUORATE_CA=" + filepath.Join(f.dataDir, "credentials", "ca.crt"),
		"export QUORATE_TOKEN=qrt_",
		"quorate check --addr " + nodes[0].rpc + " --name api --key user:42 --algorithm token_bucket --limit 100 --period 1m",
		"quorate status --addr " + nodes[0].rpc,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("stdout does not contain %q:\n%s", want, s)
		}
	}
	if !strings.Contains(errOut.String(), "[n1] fake agent up: agent --node-id n1") {
		t.Errorf("stderr lacks n1's prefixed output:\n%s", errOut.String())
	}
	for _, n := range nodes {
		if st, err := os.Stat(n.dataDir); err != nil || !st.IsDir() {
			t.Errorf("data dir of %s: %v", n.id, err)
		}
	}

	// n2 dies: reported, n1 keeps running.
	resp, err := http.Get("http://" + nodes[1].http + "/exit")
	if err == nil {
		resp.Body.Close()
	}
	waitFor(t, "n2's exit to be reported", func() bool {
		return strings.Contains(errOut.String(), "[dev] n2 (pid ")
	})
	if !strings.Contains(errOut.String(), "exited unexpectedly: exit status 3; 1 of 2 nodes still running") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
	hc := &http.Client{}
	defer hc.CloseIdleConnections()
	if ok, why := probeReady(context.Background(), hc, nodes[0]); !ok {
		t.Errorf("n1 not ready after n2 died: %s", why)
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
	if ok, _ := probeReady(context.Background(), hc, nodes[0]); ok {
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
		if c := cfgs[i]; c.LeaseTTL != 30*time.Second || c.LeaseAcquireWait != 50*time.Millisecond || c.Replicas != 1 || c.NodeID != n.id {
			t.Errorf("%s: lease TTL %v, acquire wait %v, replicas %d, id %s; want 30s, 50ms, 1 (overriding dev's 3), %s",
				n.id, c.LeaseTTL, c.LeaseAcquireWait, c.Replicas, c.NodeID, n.id)
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
