package localcluster

import (
	"strconv"
	"strings"

	"github.com/quorate/quorate/security"
)

// Node is one agent's identity and addresses.
type Node struct {
	ID                string
	Data              string // data directory
	RPC, HTTP, Gossip string // host:port
	Peer              string // host:port of the peer port
}

// Layout is a cluster of nodes that bootstrap together, and what every
// agent of it is started with.
type Layout struct {
	Nodes []Node
	// Shards is the number of shard groups; 0 keeps the agent's default.
	Shards int
	// LogLevel of every agent; "" keeps the agent's default (info).
	LogLevel string
	// Credentials is a directory laid out by security.Dev (make it with
	// security.Dev.Ensure); every agent gets its credential flags from it.
	Credentials string
	// Extra arguments go last on every command line, so they override. In
	// each, {node} becomes the node's id and {data} its data directory, so
	// a file the nodes write can be one per node
	// (--decision-log=file:{data}/decisions.jsonl).
	Extra []string
}

// Args is node i's command line (without the binary): it joins every other
// node's gossip address, the cluster bootstraps once all the nodes have
// met, and shards get three replicas, or as many as there are nodes.
func (l Layout) Args(i int) []string {
	return l.args(l.Nodes[i], l.gossipExcept(i), true)
}

// JoinArgs is the command line of n, a node that is not one of l.Nodes,
// joining the cluster l.Nodes bootstrapped: it joins every one of them and
// bootstraps nothing itself. Its --replicas is the cluster's, in case it
// comes to lead the meta group.
func (l Layout) JoinArgs(n Node) []string {
	return l.args(n, l.gossipExcept(-1), false)
}

func (l Layout) gossipExcept(i int) []string {
	var join []string
	for j, o := range l.Nodes {
		if j != i {
			join = append(join, o.Gossip)
		}
	}
	return join
}

// args is n's command line; bootstrap says whether it is one of the nodes
// that bootstrap the cluster.
func (l Layout) args(n Node, join []string, bootstrap bool) []string {
	args := []string{"agent",
		"--node-id", n.ID,
		"--data", n.Data,
		"--rpc", n.RPC,
		"--peer", n.Peer,
		"--http", n.HTTP,
		"--gossip", n.Gossip,
	}
	if bootstrap {
		args = append(args, "--bootstrap-expect", strconv.Itoa(len(l.Nodes)))
	}
	args = append(args, "--replicas", strconv.Itoa(min(3, len(l.Nodes))))
	if l.Shards > 0 {
		args = append(args, "--shards", strconv.Itoa(l.Shards))
	}
	if l.LogLevel != "" {
		args = append(args, "--log-level", l.LogLevel)
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	if l.Credentials != "" {
		args = append(args, security.Dev{Dir: l.Credentials}.AgentArgs(n.ID)...)
	}
	r := strings.NewReplacer("{node}", n.ID, "{data}", n.Data)
	for _, a := range l.Extra {
		args = append(args, r.Replace(a))
	}
	return args
}
