package cluster

import (
	"encoding/json"
	"io"
	"log"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// gossipMeta is what a node tells the others about itself through memberlist.
type gossipMeta struct {
	RPC          string `json:"r"`
	HTTP         string `json:"h"`
	Bootstrapped bool   `json:"b,omitempty"`
}

// gossip wraps memberlist: membership, and a signal when it changes.
type gossip struct {
	ml *memberlist.Memberlist

	mu      sync.Mutex
	meta    gossipMeta    // guarded by mu: this node's meta
	changed chan struct{} // guarded by mu: closed and replaced on every change
}

func startGossip(cfg *Config) (*gossip, error) {
	host, portStr, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portStr)
	g := &gossip{meta: gossipMeta{RPC: cfg.RPCAddr, HTTP: cfg.HTTPAddr}, changed: make(chan struct{})}
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.NodeID
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = host, port
	mc.Delegate = (*gossipDelegate)(g)
	mc.Events = (*gossipEvents)(g)
	mc.Logger = log.New(io.Discard, "", 0)
	// A node that left and comes back under the same name must be able to
	// reclaim it at once (a restarted agent), rather than wait out the
	// dead-node reclaim time.
	mc.DeadNodeReclaimTime = time.Second
	if ip := localIP(cfg.GossipAddr); ip != nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{host}, BindPort: port, Logger: mc.Logger})
		if err != nil {
			return nil, err
		}
		if port == 0 {
			mc.BindPort, mc.AdvertisePort = nt.GetAutoBindPort(), nt.GetAutoBindPort()
		}
		mc.Transport = &localNetTransport{NetTransport: nt, ip: ip}
		if g.ml, err = memberlist.Create(mc); err != nil {
			_ = nt.Shutdown()
			return nil, err
		}
		return g, nil
	}
	g.ml, err = memberlist.Create(mc)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// join contacts the seeds until one answers or stop is closed.
func (g *gossip) join(seeds []string, stop <-chan struct{}) {
	if len(seeds) == 0 {
		return
	}
	for {
		if n, _ := g.ml.Join(seeds); n > 0 {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// members returns the nodes currently alive or suspect, by ID.
func (g *gossip) members() map[string]*memberlist.Node {
	out := map[string]*memberlist.Node{}
	for _, n := range g.ml.Members() {
		out[n.Name] = n
	}
	return out
}

// aliveInfos returns the alive members as nodeInfos, sorted by ID, and
// whether any of them says the cluster is already bootstrapped.
func (g *gossip) aliveInfos() ([]nodeInfo, bool) {
	var infos []nodeInfo
	boot := false
	for _, n := range g.ml.Members() {
		if n.State != memberlist.StateAlive {
			continue
		}
		var m gossipMeta
		if json.Unmarshal(n.Meta, &m) != nil {
			continue
		}
		boot = boot || m.Bootstrapped
		infos = append(infos, nodeInfo{ID: n.Name, RPC: m.RPC, HTTP: m.HTTP, Gossip: n.Address()})
	}
	slices.SortFunc(infos, func(a, b nodeInfo) int { return cmpString(a.ID, b.ID) })
	return infos, boot
}

// setBootstrapped advertises that this node belongs to a bootstrapped cluster.
func (g *gossip) setBootstrapped() {
	g.mu.Lock()
	g.meta.Bootstrapped = true
	g.mu.Unlock()
	_ = g.ml.UpdateNode(time.Second)
}

// changes returns a channel closed at the next membership change.
func (g *gossip) changes() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *gossip) notify() {
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

func (g *gossip) leave() {
	_ = g.ml.Leave(2 * time.Second)
	_ = g.ml.Shutdown()
}

type gossipDelegate gossip

func (d *gossipDelegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _ := json.Marshal(d.meta)
	return b
}
func (d *gossipDelegate) NotifyMsg([]byte)                           {}
func (d *gossipDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *gossipDelegate) LocalState(join bool) []byte                { return nil }
func (d *gossipDelegate) MergeRemoteState(buf []byte, join bool)     {}

type gossipEvents gossip

func (e *gossipEvents) NotifyJoin(*memberlist.Node)   { (*gossip)(e).notify() }
func (e *gossipEvents) NotifyLeave(*memberlist.Node)  { (*gossip)(e).notify() }
func (e *gossipEvents) NotifyUpdate(*memberlist.Node) { (*gossip)(e).notify() }
