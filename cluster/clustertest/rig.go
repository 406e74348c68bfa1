// Package clustertest starts real quorate clusters for tests: N `quorate
// agent` processes built from this tree, on free loopback ports, with data
// in a temporary directory. Nodes can be killed (SIGKILL), stopped (SIGTERM),
// restarted and paused, as a user would do to a running cluster.
package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/cluster/agentproc"
	"github.com/quorate/quorate/rpc/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/quorate once per test process and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "quorate-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "quorate")
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		// The agents run without the race detector by default: they are
		// real servers under timing-sensitive Raft, and the packages they
		// are built from are race-tested on their own. QUORATE_TEST_RACE=1
		// builds them with it.
		args := []string{"build", "-o", binPath, "./cmd/quorate"}
		if os.Getenv("QUORATE_TEST_RACE") != "" {
			args = []string{"build", "-race", "-o", binPath, "./cmd/quorate"}
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building quorate: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Node is one agent process.
type Node struct {
	ID                string
	RPC, HTTP, Gossip string
	Peer              string
	Data              string
	args              []string
	proc              *agentproc.Proc
	log               *agentproc.Log
}

// Cluster is a set of agents started together.
type Cluster struct {
	t     testing.TB
	bin   string
	Nodes []*Node
	// Creds are the cluster's credentials: a CA, node certificates, the
	// tokens file with an operator (every scope), app (check) and
	// prometheus (read) token, and the gossip keyring.
	Creds security.Dev

	opts Options
	dir  string

	mu      sync.Mutex
	clients map[string]*client.Client
}

// Options tune Start.
type Options struct {
	Shards    int      // default 16
	ExtraArgs []string // passed to every agent
}

// Start starts n agents that bootstrap one cluster, waits until every one
// is ready, and stops them all when the test ends. Ports are picked free,
// but another process may take one before an agent binds it (tests of other
// packages run in parallel): a start that fails that way is retried on new
// ports.
func Start(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	for attempt := 1; ; attempt++ {
		c, ok := tryStart(t, n, opts)
		if ok {
			return c
		}
		if attempt == 3 {
			t.Fatalf("could not start a cluster: a port was taken on each of %d attempts", attempt)
		}
		t.Logf("a port was taken before an agent bound it; retrying on new ports")
	}
}

func tryStart(t testing.TB, n int, opts Options) (*Cluster, bool) {
	t.Helper()
	dir := t.TempDir()
	if opts.Shards == 0 {
		opts.Shards = 16
	}
	c := &Cluster{t: t, bin: Binary(t), clients: map[string]*client.Client{}, opts: opts, dir: dir}
	var ids []string
	for i := range n {
		c.Nodes = append(c.Nodes, &Node{
			ID: fmt.Sprintf("n%d", i+1), RPC: freeAddr(t), HTTP: freeAddr(t), Gossip: freeGossipAddr(t), Peer: freeAddr(t),
			Data: filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
		})
		ids = append(ids, c.Nodes[i].ID)
	}
	c.Creds = security.Dev{Dir: filepath.Join(dir, "credentials")}
	if err := c.Creds.Ensure(ids); err != nil {
		t.Fatal(err)
	}
	layout := agentproc.Layout{Shards: opts.Shards, LogLevel: "warn", Credentials: c.Creds.Dir, Extra: opts.ExtraArgs}
	for _, nd := range c.Nodes {
		layout.Nodes = append(layout.Nodes, agentproc.Node{ID: nd.ID, Data: nd.Data, RPC: nd.RPC, HTTP: nd.HTTP, Gossip: nd.Gossip, Peer: nd.Peer})
	}
	for i, nd := range c.Nodes {
		nd.args = layout.Args(i)
	}
	for i := range c.Nodes {
		c.start(i)
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := range c.Nodes {
		for !c.ready(i) {
			for j := range c.Nodes {
				if !c.Running(j) {
					if strings.Contains(c.Nodes[j].log.String(), "address already in use") {
						c.cleanup()
						return nil, false
					}
					c.cleanup()
					t.Fatalf("%s exited while starting; its log:\n%s", c.Nodes[j].ID, c.Nodes[j].log.String())
				}
			}
			if time.Now().After(deadline) {
				c.cleanup()
				t.Fatalf("%s not ready after 60s; its log:\n%s", c.Nodes[i].ID, c.Nodes[i].log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Cleanup(c.cleanup)
	return c, true
}

func (c *Cluster) start(i int) {
	nd := c.Nodes[i]
	nd.log = &agentproc.Log{}
	p, err := agentproc.Start(c.bin, nd.args, agentproc.Options{Stdout: nd.log, Stderr: nd.log, Detach: true})
	if err != nil {
		c.t.Fatalf("starting %s: %v", nd.ID, err)
	}
	nd.proc = p
}

// Running reports whether node i's process is alive.
func (c *Cluster) Running(i int) bool {
	p := c.Nodes[i].proc
	return p != nil && p.Running()
}

// Kill sends SIGKILL to node i and waits for it to die.
func (c *Cluster) Kill(i int) {
	c.signal(i, syscall.SIGKILL, 10*time.Second)
}

// Stop sends SIGTERM to node i and waits for it to exit (graceful shutdown).
func (c *Cluster) Stop(i int) {
	c.signal(i, syscall.SIGTERM, 30*time.Second)
}

func (c *Cluster) signal(i int, sig syscall.Signal, wait time.Duration) {
	c.t.Helper()
	nd := c.Nodes[i]
	if !c.Running(i) {
		return
	}
	if nd.proc.Stop(sig, wait) {
		c.t.Errorf("%s did not exit within %s of %s; killed.\n%s", nd.ID, wait, sig, nd.log.String())
	}
}

// Restart starts node i again with its data; it does not wait for ready.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if c.Running(i) {
		c.t.Fatalf("restart of running node %s", c.Nodes[i].ID)
	}
	c.start(i)
}

// WaitReady waits until the given nodes answer /readyz with 200.
func (c *Cluster) WaitReady(timeout time.Duration, idx ...int) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, i := range idx {
		for !c.ready(i) {
			if time.Now().After(deadline) {
				c.t.Fatalf("%s not ready after %s; its log:\n%s", c.Nodes[i].ID, timeout, c.Nodes[i].log.String())
			}
			if !c.Running(i) {
				c.t.Fatalf("%s exited; its log:\n%s", c.Nodes[i].ID, c.Nodes[i].log.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (c *Cluster) ready(i int) bool {
	return agentproc.Ready(context.Background(), http.DefaultClient, c.Nodes[i].HTTP)
}

// Client returns a client connected to node i (shared, closed at cleanup).
func (c *Cluster) Client(i int) *client.Client {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := c.Nodes[i].RPC
	if cl, ok := c.clients[addr]; ok {
		return cl
	}
	cl, err := client.Dial(addr, c.DialOptions("operator")...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.clients[addr] = cl
	return cl
}

// DialOptions are what a client of the cluster dials with: TLS trusting
// its CA, and the token of a role of Creds (operator, app, prometheus).
func (c *Cluster) DialOptions(role string) []grpc.DialOption {
	c.t.Helper()
	ca, err := client.WithCAFile(c.Creds.CA())
	if err != nil {
		c.t.Fatal(err)
	}
	return []grpc.DialOption{ca, client.WithToken(c.Token(role))}
}

// Token is the plain token of a role of Creds.
func (c *Cluster) Token(role string) string {
	c.t.Helper()
	tok, err := c.Creds.Token(role)
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// ShardLeader asks node i which node leads shard s, and returns its index
// (-1 if unknown).
func (c *Cluster) ShardLeader(i, s int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := c.Client(i).Status(ctx)
	if err != nil {
		return -1
	}
	for _, sh := range st.GetShards() {
		if int(sh.GetId()) == s {
			for j, nd := range c.Nodes {
				if nd.ID == sh.GetLeaderId() {
					return j
				}
			}
		}
	}
	return -1
}

// Metric returns the sum of a Prometheus counter's samples on node i whose
// line contains every one of match (e.g. `quorate_forwards_total`, `result="ok"`).
func (c *Cluster) Metric(i int, name string, match ...string) float64 {
	req, err := http.NewRequest(http.MethodGet, "http://"+c.Nodes[i].HTTP+"/metrics", nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+c.Token("prometheus"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	var sum float64
lines:
	for _, line := range strings.Split(b.String(), "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				continue lines
			}
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// Log returns node i's output so far.
func (c *Cluster) Log(i int) string { return c.Nodes[i].log.String() }

// Log returns the node's output so far.
func (nd *Node) Log() string { return nd.log.String() }

// PID is node i's process id (0 if it never started).
func (c *Cluster) PID(i int) int {
	if p := c.Nodes[i].proc; p != nil {
		return p.PID()
	}
	return 0
}

// Add starts one more node, id, that joins the running cluster through
// node 0's gossip address, with the cluster's credentials and extra args
// after the common ones; it returns its index in Nodes. It does not wait
// for it to be ready.
func (c *Cluster) Add(id string, extra ...string) int {
	c.t.Helper()
	if err := c.Creds.Ensure([]string{id}); err != nil {
		c.t.Fatal(err)
	}
	nd := &Node{ID: id, RPC: freeAddr(c.t), HTTP: freeAddr(c.t), Gossip: freeGossipAddr(c.t), Peer: freeAddr(c.t),
		Data: filepath.Join(c.dir, id)}
	nd.args = append([]string{"agent", "--node-id", id, "--data", nd.Data, "--rpc", nd.RPC, "--peer", nd.Peer,
		"--http", nd.HTTP, "--gossip", nd.Gossip, "--log-level", "warn", "--join", c.Nodes[0].Gossip},
		security.Dev{Dir: c.Creds.Dir}.AgentArgs(id)...)
	nd.args = append(append(nd.args, c.opts.ExtraArgs...), extra...)
	c.mu.Lock() // Client reads Nodes from other goroutines
	c.Nodes = append(c.Nodes, nd)
	i := len(c.Nodes) - 1
	c.mu.Unlock()
	c.start(i)
	return i
}

// StartExtra starts one more agent, id, on free ports with a data
// directory of its own, given args (its credentials and --join among
// them), and stops it when the test ends. It is not one of Nodes: a node
// the cluster is meant to refuse, say.
func (c *Cluster) StartExtra(t testing.TB, id string, args []string) *Node {
	t.Helper()
	nd := &Node{ID: id, RPC: freeAddr(t), HTTP: freeAddr(t), Gossip: freeGossipAddr(t), Peer: freeAddr(t), Data: t.TempDir(), log: &agentproc.Log{}}
	nd.args = append([]string{"agent", "--node-id", id, "--data", nd.Data, "--rpc", nd.RPC, "--peer", nd.Peer,
		"--http", nd.HTTP, "--gossip", nd.Gossip, "--log-level", "info"}, args...)
	p, err := agentproc.Start(c.bin, nd.args, agentproc.Options{Stdout: nd.log, Stderr: nd.log, Detach: true})
	if err != nil {
		t.Fatalf("starting %s: %v", id, err)
	}
	nd.proc = p
	t.Cleanup(func() { p.Stop(syscall.SIGTERM, 10*time.Second) })
	return nd
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	for _, cl := range c.clients {
		cl.Close()
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Go(func() { c.Stop(i) })
	}
	wg.Wait()
	if c.t.Failed() {
		for _, nd := range c.Nodes {
			c.t.Logf("--- log of %s ---\n%s", nd.ID, tail(nd.log.String(), 4000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Item is a convenience for a strict check item.
func Item(name, key string, limit int64, period time.Duration) *pb.Item {
	return &pb.Item{Name: name, Key: key, Algorithm: pb.Algorithm_ALGORITHM_TOKEN_BUCKET, Limit: limit,
		Period: durationpb.New(period), Fail: pb.FailMode_FAIL_MODE_CLOSED}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// freeGossipAddr finds a port free for both TCP and UDP, as memberlist
// binds both.
func freeGossipAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := freeAddr(t)
		u, err := net.ListenPacket("udp", addr)
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no free gossip port")
	return ""
}
