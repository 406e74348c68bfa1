package cluster

import (
	"cmp"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/quorate/quorate/cluster/meta"
)

// gossipMeta is what a node tells the others about itself through memberlist.
type gossipMeta struct {
	RPC          string `json:"r"`
	Peer         string `json:"p"`
	HTTP         string `json:"h"`
	Bootstrapped bool   `json:"b,omitempty"`
	// Nonce is random per process; Ready and Seal are the bootstrap
	// handshake (bootstrap.go).
	Nonce string `json:"n,omitempty"`
	Ready string `json:"y,omitempty"`
	Seal  string `json:"s,omitempty"`
	// Epoch is the epoch of the record this node follows: a node that
	// sees a newer one asks for it (reconcile.go).
	Epoch uint64 `json:"e,omitempty"`
}

// gossip wraps memberlist: membership, and a signal when it changes.
type gossip struct {
	ml      *memberlist.Memberlist
	log     *slog.Logger
	keyring *memberlist.Keyring // set at start; safe for concurrent use

	mu      sync.Mutex
	meta    gossipMeta    // guarded by mu: this node's meta
	changed chan struct{} // guarded by mu: closed and replaced on every change
}

func startGossip(cfg *Config, keys [][]byte) (*gossip, error) {
	host, portStr, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portStr)
	nonce := strconv.FormatUint(rand.Uint64(), 16)
	g := &gossip{meta: gossipMeta{RPC: cfg.RPCAddr, Peer: cfg.PeerAddr, HTTP: cfg.HTTPAddr, Nonce: nonce}, changed: make(chan struct{}),
		log: cfg.Logger.With("node", cfg.NodeID)}
	mc := memberlist.DefaultLANConfig()
	if err := encryptGossip(g, mc, keys, g.log); err != nil {
		return nil, err
	}
	mc.Name = cfg.NodeID
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = host, port
	mc.Delegate = (*gossipDelegate)(g)
	mc.Events = (*gossipEvents)(g)
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
	var warned string
	for {
		n, err := g.ml.Join(seeds)
		if n > 0 {
			return
		}
		if err != nil && err.Error() != warned {
			warned = err.Error()
			logJoinFailure(g.log, seeds, err)
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

// alive returns the alive members with their meta, sorted by ID.
func (g *gossip) alive() []peerView {
	var out []peerView
	for _, n := range g.ml.Members() {
		if n.State != memberlist.StateAlive {
			continue
		}
		var m gossipMeta
		if json.Unmarshal(n.Meta, &m) != nil {
			continue
		}
		out = append(out, peerView{info: meta.NodeInfo{ID: n.Name, RPC: m.RPC, Peer: m.Peer, HTTP: m.HTTP, Gossip: n.Address()}, meta: m})
	}
	slices.SortFunc(out, func(a, b peerView) int { return cmp.Compare(a.info.ID, b.info.ID) })
	return out
}

// setReady advertises the digest of the record this node would bootstrap
// with, and reports whether that changed what it advertises.
func (g *gossip) setReady(digest string) bool {
	g.mu.Lock()
	same := g.meta.Ready == digest
	g.meta.Ready = digest
	g.mu.Unlock()
	if !same {
		_ = g.ml.UpdateNode(time.Second)
	}
	return !same
}

// setBootstrapped advertises that this node belongs to a bootstrapped
// cluster, with the seal of its bootstrap if it just took part in one.
func (g *gossip) setBootstrapped(seal string) {
	g.mu.Lock()
	g.meta.Bootstrapped = true
	g.meta.Seal = seal
	g.mu.Unlock()
	_ = g.ml.UpdateNode(time.Second)
}

// setEpoch advertises the epoch of the record this node follows.
func (g *gossip) setEpoch(epoch uint64) {
	g.mu.Lock()
	same := g.meta.Epoch == epoch
	g.meta.Epoch = epoch
	g.mu.Unlock()
	if !same {
		_ = g.ml.UpdateNode(time.Second)
	}
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
