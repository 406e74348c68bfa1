package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/cluster/agentproc"
	"github.com/quorate/quorate/rpc/client"
	"github.com/quorate/quorate/security"
)

// Ports every node uses on its own loopback address. With one address per
// node they need not be free-picked; 127.0.0.1 is never used.
const (
	gossipPort = 17300
	rpcPort    = 17400
	httpPort   = 17500
	peerPort   = 17600
)

// agent is one node: its addresses, data and, while running, its process.
type agent struct {
	id   string
	ip   string
	data string
	log  string // file the agent's output is appended to

	// Guarded by cluster.mu.
	proc        *agentproc.Proc
	paused      bool
	clockOffset time.Duration
}

func (a *agent) rpc() string    { return net.JoinHostPort(a.ip, fmt.Sprint(rpcPort)) }
func (a *agent) http() string   { return net.JoinHostPort(a.ip, fmt.Sprint(httpPort)) }
func (a *agent) gossip() string { return net.JoinHostPort(a.ip, fmt.Sprint(gossipPort)) }
func (a *agent) peer() string   { return net.JoinHostPort(a.ip, fmt.Sprint(peerPort)) }

// cluster is the set of agents of one run. It starts and signals only the
// processes it started, by PID. Its agents' process fields are guarded by mu.
type cluster struct {
	bin    string
	shards int
	agents []*agent
	creds  security.Dev
	// dialOpts are the clients' TLS and operator token.
	dialOpts []grpc.DialOption
	// spare is the node a membership fault adds and removes (membership.go);
	// nil until then. Guarded by mu.
	spare *agent

	mu sync.Mutex
}

// addressBlock picks the per-run block 127.a.b.0/24 from the seed and the
// process id, avoiding 127.0.0.0/16 (127.0.0.1 is everybody's).
func addressBlock(seed uint64, pid int) (a, b int) {
	h := seed*0x9E3779B97F4A7C15 ^ uint64(pid)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	return 100 + int(h%100), int((h >> 8) % 256)
}

func newCluster(bin, dir string, n, shards int, seed uint64) (*cluster, error) {
	// Two runs sharing a folder would share the agents' data directories.
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		return nil, fmt.Errorf("--out %s: already holds a run (%s exists); choose a new folder", dir, filepath.Join(dir, "data"))
	}
	a, b := addressBlock(seed, os.Getpid())
	c := &cluster{bin: bin, shards: shards}
	for i := range n {
		ag := &agent{id: fmt.Sprintf("n%d", i+1), ip: fmt.Sprintf("127.%d.%d.%d", a, b, i+2),
			data: filepath.Join(dir, "data", fmt.Sprintf("n%d", i+1)),
			log:  filepath.Join(dir, "logs", fmt.Sprintf("n%d.log", i+1))}
		// Fail early, with a clear error, if another process holds a port.
		for _, addr := range []string{ag.rpc(), ag.http(), ag.gossip(), ag.peer()} {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return nil, fmt.Errorf("chaos: address %s not free: %w", addr, err)
			}
			l.Close()
		}
		c.agents = append(c.agents, ag)
	}
	for _, d := range []string{filepath.Join(dir, "data"), filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	}
	if err := c.makeCreds(filepath.Join(dir, "credentials")); err != nil {
		return nil, fmt.Errorf("chaos: credentials: %w", err)
	}
	return c, nil
}

// makeCreds makes the cluster's credentials (certificates valid for the
// nodes' own addresses) and the clients' dial options.
func (c *cluster) makeCreds(dir string) error {
	var ids []string
	for _, a := range c.agents {
		ids = append(ids, a.id)
	}
	c.creds = security.Dev{Dir: dir, Hosts: c.ips()}
	if err := c.creds.Ensure(ids); err != nil {
		return err
	}
	ca, err := client.WithCAFile(c.creds.CA())
	if err != nil {
		return err
	}
	tok, err := c.creds.Token("operator")
	if err != nil {
		return err
	}
	c.dialOpts = []grpc.DialOption{ca, client.WithToken(tok)}
	return nil
}

// ips returns every node's address, in node order.
func (c *cluster) ips() []string {
	out := make([]string, len(c.agents))
	for i, a := range c.agents {
		out[i] = a.ip
	}
	return out
}

func (c *cluster) args(i int) []string {
	args := c.argsAmong(c.agents, i)
	if d := c.agents[i].clockOffset; d != 0 {
		args = append(args, "--debug-clock-offset", d.String())
	}
	return args
}

// argsAmong is the command line of nodes[i], started with nodes as the
// cluster it joins.
func (c *cluster) argsAmong(nodes []*agent, i int) []string {
	layout := agentproc.Layout{Shards: c.shards, LogLevel: "info", Credentials: c.creds.Dir}
	for _, o := range nodes {
		layout.Nodes = append(layout.Nodes, agentproc.Node{ID: o.id, Data: o.data, RPC: o.rpc(), HTTP: o.http(), Gossip: o.gossip(), Peer: o.peer()})
	}
	return append(layout.Args(i), "--dead-node-grace", deadNodeGrace.String())
}

// start starts node i (which must not be running) with its data directory.
func (c *cluster) start(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.agents[i]
	if a.running() {
		return fmt.Errorf("chaos: start of running node %s", a.id)
	}
	p, err := c.launch(a, c.args(i))
	if err != nil {
		return err
	}
	a.proc, a.paused = p, false
	return nil
}

// launch starts an agent process with args, its output appended to the
// agent's log after a line saying how it was started.
func (c *cluster) launch(a *agent, args []string) (*agentproc.Proc, error) {
	f, err := os.OpenFile(a.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	fmt.Fprintf(f, "=== chaos: %s start: %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), c.bin, strings.Join(args, " "))
	p, err := agentproc.Start(c.bin, args, agentproc.Options{Stdout: f, Stderr: f, Detach: true, OnExit: func() { f.Close() }})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("chaos: starting %s: %w", a.id, err)
	}
	return p, nil
}

// running reports whether the agent's process is alive. Needs c.mu.
func (a *agent) running() bool {
	return a.proc != nil && a.proc.Running()
}

// kill sends SIGKILL to node i, if running, and waits for it to exit.
func (c *cluster) kill(i int) {
	c.mu.Lock()
	a := c.agents[i]
	if !a.running() {
		c.mu.Unlock()
		return
	}
	_ = a.proc.Signal(syscall.SIGKILL)
	done := a.proc.Done()
	a.paused = false
	c.mu.Unlock()
	<-done
}

// pause sends SIGSTOP to node i; resume sends SIGCONT.
func (c *cluster) pause(i int) error  { return c.signal(i, syscall.SIGSTOP, true) }
func (c *cluster) resume(i int) error { return c.signal(i, syscall.SIGCONT, false) }

func (c *cluster) signal(i int, sig syscall.Signal, paused bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.agents[i]
	if !a.running() {
		return fmt.Errorf("chaos: %s is not running", a.id)
	}
	if err := a.proc.Signal(sig); err != nil {
		return fmt.Errorf("chaos: %s to %s: %w", sig, a.id, err)
	}
	a.paused = paused
	return nil
}

// killAll kills every node; it is the harness's last word on its processes.
func (c *cluster) killAll() {
	var wg sync.WaitGroup
	for i := range c.agents {
		wg.Go(func() { c.kill(i) })
	}
	wg.Wait()
	c.stopSpare()
}

// setClockOffset sets the --debug-clock-offset node i gets at its next start.
func (c *cluster) setClockOffset(i int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.agents[i].clockOffset = d
}

// ready reports whether node i answers /readyz with 200.
func (c *cluster) ready(ctx context.Context, i int) bool {
	return agentproc.Ready(ctx, http.DefaultClient, c.agents[i].http())
}

// waitReady waits until every node in idx is ready, failing if one exits.
func (c *cluster) waitReady(ctx context.Context, timeout time.Duration, idx ...int) error {
	deadline := time.Now().Add(timeout)
	for _, i := range idx {
		for !c.ready(ctx, i) {
			c.mu.Lock()
			alive := c.agents[i].running()
			c.mu.Unlock()
			switch {
			case !alive:
				return fmt.Errorf("chaos: %s exited while starting; see %s", c.agents[i].id, c.agents[i].log)
			case time.Now().After(deadline):
				return fmt.Errorf("chaos: %s not ready after %s; see %s", c.agents[i].id, timeout, c.agents[i].log)
			case ctx.Err() != nil:
				return ctx.Err()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func (c *cluster) all() []int {
	idx := make([]int, len(c.agents))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// up reports which nodes are running and not paused.
func (c *cluster) up() []bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]bool, len(c.agents))
	for i, a := range c.agents {
		out[i] = a.running() && !a.paused
	}
	return out
}

// errNoLeader: no node could say who leads the shard.
var errNoLeader = errors.New("chaos: shard leader unknown")

// shardLeader asks the nodes that are up, in turn, which node leads shard s.
func (c *cluster) shardLeader(ctx context.Context, s int) (int, error) {
	for i, ok := range c.up() {
		if !ok {
			continue
		}
		if l := c.askLeader(ctx, i, s); l >= 0 {
			return l, nil
		}
	}
	return -1, errNoLeader
}

func (c *cluster) askLeader(ctx context.Context, i, s int) int {
	cl, err := client.Dial(c.agents[i].rpc(), c.dialOpts...)
	if err != nil {
		return -1
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return -1
	}
	for _, sh := range st.GetShards() {
		if int(sh.GetId()) != s {
			continue
		}
		for j, a := range c.agents {
			if a.id == sh.GetLeaderId() {
				return j
			}
		}
	}
	return -1
}
