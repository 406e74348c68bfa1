package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/security"
)

// Options configure Launch.
type Options struct {
	// Binary is the quorate binary to run as "agent" (quorate bench passes
	// itself, os.Executable()).
	Binary string
	// Nodes is the number of agents, at least 1.
	Nodes int
	// Shards is the number of shard groups; 0 keeps the agent's default.
	Shards int
	// LogLevel of the agents (default warn).
	LogLevel string
	// ReadyTimeout bounds the wait for every node's /readyz (default 60s).
	ReadyTimeout time.Duration
	// ExtraArgs are added to every agent's command line.
	ExtraArgs []string
	// TempDir is where the cluster's directory is made (and removed again
	// by Close); empty means os.TempDir().
	TempDir string
	// LogMax is how much of each node's latest output its Log keeps, 0 for
	// all of it.
	LogMax int
}

// Timings of a launched cluster's life.
const (
	defaultReadyTimeout = 60 * time.Second
	// StopGrace is how long Close gives the agents to stop on SIGTERM
	// before it kills them.
	StopGrace = 15 * time.Second
)

// Launch starts a throwaway cluster: opts.Nodes agents (n1, n2, ...) on
// free loopback ports, with their data and credentials (security.Dev) in a
// new directory, and waits until every node answers /readyz with 200. On
// failure, and if ctx is cancelled meanwhile, it stops whatever it started,
// removes the directory and returns an error that carries the failing
// node's last log lines (an *ExitedError if an agent exited). Close ends the
// cluster.
func Launch(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("localcluster: %d nodes: need at least 1", opts.Nodes)
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = defaultReadyTimeout
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "warn"
	}
	dir, err := os.MkdirTemp(opts.TempDir, "quorate-cluster-")
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	defer func() {
		if err != nil {
			if c != nil {
				c.Close()
			} else {
				_ = os.RemoveAll(dir)
			}
			c = nil
		}
	}()
	creds := security.Dev{Dir: filepath.Join(dir, "credentials")}
	layout := Layout{Shards: opts.Shards, LogLevel: opts.LogLevel, Credentials: creds.Dir, Extra: opts.ExtraArgs}
	ports, err := FreePorts(4 * opts.Nodes)
	if err != nil {
		return nil, err
	}
	var ids []string
	for i := range opts.Nodes {
		n := nodeOn(dir, "n"+strconv.Itoa(i+1), ports[4*i:])
		layout.Nodes = append(layout.Nodes, n)
		ids = append(ids, n.ID)
	}
	if err := creds.Ensure(ids); err != nil {
		return nil, fmt.Errorf("localcluster: credentials: %w", err)
	}
	c = New(Config{Binary: opts.Binary, Layout: layout, LogMax: opts.LogMax, ReadyPoll: 100 * time.Millisecond})
	c.dir = dir
	if err := c.StartAll(); err != nil {
		return c, err
	}
	if err := c.WaitReady(ctx, opts.ReadyTimeout); err != nil {
		if ctx.Err() != nil {
			return c, fmt.Errorf("localcluster: waiting for the cluster: %w", err)
		}
		return c, err
	}
	return c, nil
}

// Dir is the directory Launch made for the cluster's data and
// credentials, "" for a cluster New made.
func (c *Cluster) Dir() string { return c.dir }

// Creds are the credentials of a launched cluster.
func (c *Cluster) Creds() security.Dev { return security.Dev{Dir: c.cfg.Layout.Credentials} }

// Close stops every agent (SIGTERM, then SIGKILL after StopGrace), waits for
// all of them, and removes the directory Launch made. It is safe to call
// more than once.
func (c *Cluster) Close() {
	c.StopAll(StopGrace, nil)
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
}

// Logs returns the last lines each node wrote, for diagnosing a failed run.
func (c *Cluster) Logs() string {
	var b []byte
	for i := range c.Len() {
		b = fmt.Appendf(b, "--- %s (pid %d)\n%s", c.Node(i).ID, c.PID(i), c.Log(i))
	}
	return string(b)
}

// DialOptions are what a client of a cluster with credentials creds dials
// with: TLS trusting its CA, and the token of role (operator: every scope;
// app: check; prometheus: read).
func DialOptions(creds security.Dev, role string) ([]grpc.DialOption, error) {
	ca, err := client.WithCAFile(creds.CA())
	if err != nil {
		return nil, err
	}
	tok, err := creds.Token(role)
	if err != nil {
		return nil, err
	}
	return []grpc.DialOption{ca, client.WithToken(tok)}, nil
}

// FreeNode lays out node id on loopback ports free now, with its data in
// dir/id.
func FreeNode(dir, id string) (Node, error) {
	ports, err := FreePorts(4)
	if err != nil {
		return Node{}, err
	}
	return nodeOn(dir, id, ports), nil
}

// nodeOn lays out node id on ports[0:4], with its data in dir/id.
func nodeOn(dir, id string, ports []int) Node {
	return Node{ID: id, Data: filepath.Join(dir, id),
		RPC: Loopback(ports[0]), HTTP: Loopback(ports[1]), Gossip: Loopback(ports[2]), Peer: Loopback(ports[3])}
}

// Loopback is 127.0.0.1:port.
func Loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// FreePorts returns n distinct loopback ports that are free now, for TCP
// and, since gossip also uses UDP, for UDP. Another process may take one
// before the agent binds it; the agent then exits saying "address already
// in use".
//
// The ports are chosen below the kernel's ephemeral range where there is
// room: a node restarted on its ports must find them free, and while it
// is down its peers keep dialling it, so an ephemeral port (what a listen
// on port 0 gives) can be taken meanwhile as the source port of any
// outgoing connection on the machine ("bind: address already in use").
func FreePorts(n int) ([]int, error) {
	var ports []int
	var hold []io.Closer
	defer func() {
		for _, h := range hold {
			h.Close()
		}
	}()
	lo, hi, ok := belowEphemeral()
	for tries := 0; len(ports) < n; tries++ {
		addr := "127.0.0.1:0"
		if ok && tries < 1000*n {
			addr = Loopback(lo + rand.IntN(hi-lo))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			if addr == "127.0.0.1:0" {
				return nil, fmt.Errorf("localcluster: finding free ports: %w", err)
			}
			continue // taken: try another
		}
		// Holding every listener until all are chosen keeps the ports
		// distinct.
		hold = append(hold, l)
		port := l.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", Loopback(port))
		if err != nil {
			continue // UDP side taken: try another
		}
		hold = append(hold, pc)
		ports = append(ports, port)
	}
	return ports, nil
}

// belowEphemeral is the range [lo, hi) of ports from 10000 up to the
// kernel's ephemeral range (Linux), if that leaves room.
func belowEphemeral() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first < 11000 {
		return 0, 0, false
	}
	return 10000, first, true
}

// Busy checks that every node's ports can be listened on now (TCP for every
// address, UDP too for gossip), and returns one line for each that cannot:
// "tcp 127.0.0.1:7401 (n1 --rpc): address already in use". Checking first
// lets a tool refuse to start, naming the port, rather than start a cluster
// in which one agent dies.
func Busy(nodes []Node) []string {
	var bad []string
	try := func(n Node, flag, network, addr string) {
		var err error
		if network == "udp" {
			var pc net.PacketConn
			if pc, err = net.ListenPacket(network, addr); err == nil {
				pc.Close()
			}
		} else {
			var l net.Listener
			if l, err = net.Listen(network, addr); err == nil {
				l.Close()
			}
		}
		if err != nil {
			if inner := errors.Unwrap(err); inner != nil {
				err = inner
			}
			bad = append(bad, fmt.Sprintf("%s %s (%s %s): %v", network, addr, n.ID, flag, err))
		}
	}
	for _, n := range nodes {
		try(n, "--rpc", "tcp", n.RPC)
		try(n, "--http", "tcp", n.HTTP)
		try(n, "--gossip", "tcp", n.Gossip)
		try(n, "--gossip", "udp", n.Gossip)
		try(n, "--peer", "tcp", n.Peer)
	}
	return bad
}
