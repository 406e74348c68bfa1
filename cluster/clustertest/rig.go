// Package clustertest starts real quorate clusters for tests: N `quorate
// agent` processes built from this tree (run by localcluster), on free
// loopback ports, with data in a temporary directory. Nodes can be killed
// (SIGKILL), stopped (SIGTERM), restarted, paused and added, as a user would
// do to a running cluster.
package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/localcluster"
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
	// log is the output of a node that StartExtra started; nil for one of
	// the cluster's own nodes, whose output the launcher keeps.
	log *localcluster.Log
	lc  *localcluster.Cluster
	i   int
}

// Cluster is a set of agents started together.
type Cluster struct {
	t     testing.TB
	lc    *localcluster.Cluster
	Nodes []*Node
	// Creds are the cluster's credentials: a CA, node certificates, the
	// tokens file with an operator (every scope), app (check) and
	// prometheus (read) token, and the gossip keyring.
	Creds security.Dev

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
	if opts.Shards == 0 {
		opts.Shards = 16
	}
	for attempt := 1; ; attempt++ {
		lc, err := localcluster.Launch(context.Background(), localcluster.Options{Binary: Binary(t), Nodes: n, Shards: opts.Shards,
			ExtraArgs: opts.ExtraArgs, TempDir: t.TempDir()})
		var exited *localcluster.ExitedError
		switch {
		case err == nil:
			return newCluster(t, lc)
		case errors.As(err, &exited) && strings.Contains(exited.Log, "address already in use") && attempt < 3:
			t.Logf("a port was taken before an agent bound it; retrying on new ports")
		case errors.As(err, &exited) && strings.Contains(exited.Log, "address already in use"):
			t.Fatalf("could not start a cluster: a port was taken on each of %d attempts", attempt)
		default:
			t.Fatal(err)
		}
	}
}

func newCluster(t testing.TB, lc *localcluster.Cluster) *Cluster {
	c := &Cluster{t: t, lc: lc, Creds: lc.Creds(), clients: map[string]*client.Client{}}
	for i := range lc.Len() {
		c.Nodes = append(c.Nodes, c.node(i))
	}
	t.Cleanup(c.cleanup)
	return c
}

func (c *Cluster) node(i int) *Node {
	n := c.lc.Node(i)
	return &Node{ID: n.ID, RPC: n.RPC, HTTP: n.HTTP, Gossip: n.Gossip, Peer: n.Peer, Data: n.Data, lc: c.lc, i: i}
}

// Running reports whether node i's process is alive.
func (c *Cluster) Running(i int) bool { return c.lc.Running(i) }

// Kill sends SIGKILL to node i and waits for it to die.
func (c *Cluster) Kill(i int) { c.lc.Kill(i) }

// Pause sends SIGSTOP to node i; Resume sends SIGCONT.
func (c *Cluster) Pause(i int) {
	c.t.Helper()
	if err := c.lc.Pause(i); err != nil {
		c.t.Fatal(err)
	}
}

func (c *Cluster) Resume(i int) {
	c.t.Helper()
	if err := c.lc.Resume(i); err != nil {
		c.t.Fatal(err)
	}
}

// stopGrace is how long a node has to exit on SIGTERM.
const stopGrace = 30 * time.Second

// Stop sends SIGTERM to node i and waits for it to exit (graceful shutdown).
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	if c.lc.Stop(i, stopGrace) {
		c.t.Errorf("%s did not exit within %s of SIGTERM; killed.\n%s", c.Nodes[i].ID, stopGrace, c.Log(i))
	}
}

// Restart starts node i again with its data; it does not wait for ready.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.lc.Start(i); err != nil {
		c.t.Fatal(err)
	}
}

// WaitReady waits until the given nodes answer /readyz with 200 and the
// test's shared client of each (Client), if it has one, is connected.
func (c *Cluster) WaitReady(timeout time.Duration, idx ...int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.lc.WaitReady(ctx, timeout, idx...); err != nil {
		var notReady *localcluster.NotReadyError
		if errors.As(err, &notReady) {
			err = fmt.Errorf("%w\n%s's log:\n%s", err, notReady.IDs[0], c.Log(notReady.Nodes[0]))
		}
		c.t.Fatal(err)
	}
	for _, i := range idx {
		if err := c.connected(ctx, i); err != nil {
			c.t.Fatalf("%s is ready but the test's connection to it is not (%v); its log:\n%s", c.Nodes[i].ID, err, c.Log(i))
		}
	}
}

// connected waits until the shared client of node i, if there is one, has
// a connection. After the node was killed and restarted that client's
// connection may be in reconnect back-off for seconds, and a call on it
// then fails with "connection refused" although the node is ready: so the
// back-off is cut short, and the wait is for the state, not for a time.
func (c *Cluster) connected(ctx context.Context, i int) error {
	c.mu.Lock()
	cl := c.clients[c.Nodes[i].RPC]
	c.mu.Unlock()
	if cl == nil {
		return nil
	}
	conn := cl.Conn()
	for {
		switch st := conn.GetState(); st {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			conn.Connect()
		case connectivity.TransientFailure:
			conn.ResetConnectBackoff()
		}
		if !conn.WaitForStateChange(ctx, conn.GetState()) {
			return fmt.Errorf("connection %s: %w", conn.GetState(), ctx.Err())
		}
	}
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
	opts, err := localcluster.DialOptions(c.Creds, role)
	if err != nil {
		c.t.Fatal(err)
	}
	return opts
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

// Log returns the output of node i's latest process so far.
func (c *Cluster) Log(i int) string { return c.lc.Log(i) }

// Log returns the node's output so far.
func (nd *Node) Log() string {
	if nd.log != nil {
		return nd.log.String()
	}
	return nd.lc.Log(nd.i)
}

// PID is node i's process id (0 if it never started).
func (c *Cluster) PID(i int) int { return c.lc.PID(i) }

// Add starts one more node, id, that joins the running cluster (through
// every first node's gossip address), with the cluster's credentials and
// extra args after the common ones; it returns its index in Nodes. It does
// not wait for it to be ready.
func (c *Cluster) Add(id string, extra ...string) int {
	c.t.Helper()
	if err := c.Creds.Ensure([]string{id}); err != nil {
		c.t.Fatal(err)
	}
	n, err := localcluster.FreeNode(c.lc.Dir(), id)
	if err != nil {
		c.t.Fatal(err)
	}
	i := c.lc.Add(n, extra...)
	c.mu.Lock() // Client reads Nodes from other goroutines
	c.Nodes = append(c.Nodes, c.node(i))
	c.mu.Unlock()
	c.Restart(i)
	return i
}

// StartExtra starts one more agent, id, on free ports with a data
// directory of its own, given args (its credentials and --join among
// them), and stops it when the test ends. It is not one of Nodes: a node
// the cluster is meant to refuse, say.
func (c *Cluster) StartExtra(t testing.TB, id string, args []string) *Node {
	t.Helper()
	n, err := localcluster.FreeNode(t.TempDir(), id)
	if err != nil {
		t.Fatal(err)
	}
	nd := &Node{ID: id, RPC: n.RPC, HTTP: n.HTTP, Gossip: n.Gossip, Peer: n.Peer, Data: n.Data, log: &localcluster.Log{}}
	args = append([]string{"agent", "--node-id", id, "--data", nd.Data, "--rpc", nd.RPC, "--peer", nd.Peer,
		"--http", nd.HTTP, "--gossip", nd.Gossip, "--log-level", "info"}, args...)
	p, err := localcluster.StartProc(Binary(t), args, localcluster.ProcOptions{Stdout: nd.log, Stderr: nd.log, Detach: true})
	if err != nil {
		t.Fatalf("starting %s: %v", id, err)
	}
	t.Cleanup(func() { p.Stop(syscall.SIGTERM, 10*time.Second) })
	return nd
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	for _, cl := range c.clients {
		cl.Close()
	}
	c.mu.Unlock()
	c.lc.StopAll(stopGrace, func(i int) {
		c.t.Errorf("%s did not exit within %s of SIGTERM; killed.\n%s", c.Nodes[i].ID, stopGrace, c.Log(i))
	})
	if c.t.Failed() {
		for i, nd := range c.Nodes {
			c.t.Logf("--- log of %s ---\n%s", nd.ID, tail(c.Log(i), 4000))
		}
	}
	c.lc.Close()
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
