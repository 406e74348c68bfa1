// Package gossip is how quorate nodes find each other: memberlist,
// encrypted with a keyring, each node advertising its addresses, its part
// in the bootstrap handshake and the epoch of the record it follows.
package gossip

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

// Meta is what a node tells the others about itself through memberlist.
type Meta struct {
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

// Config is one node's gossip.
type Config struct {
	NodeID          string
	Addr            string // host:port, TCP and UDP
	RPC, Peer, HTTP string // the addresses the node advertises
	// Keys encrypt gossip, the primary first (at least one).
	Keys   [][]byte
	Logger *slog.Logger
}

// Gossip wraps memberlist: membership, and a signal when it changes.
type Gossip struct {
	ml      *memberlist.Memberlist
	log     *slog.Logger
	keyring *memberlist.Keyring // set at start; safe for concurrent use

	mu      sync.Mutex
	meta    Meta          // guarded by mu: this node's meta
	changed chan struct{} // guarded by mu: closed and replaced on every change
}

// Start starts this node's memberlist; Join finds the others.
func Start(cfg Config) (*Gossip, error) {
	host, portStr, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, err
	}
	port, _ := strconv.Atoi(portStr)
	nonce := strconv.FormatUint(rand.Uint64(), 16)
	g := &Gossip{meta: Meta{RPC: cfg.RPC, Peer: cfg.Peer, HTTP: cfg.HTTP, Nonce: nonce}, changed: make(chan struct{}),
		log: cfg.Logger.With("node", cfg.NodeID)}
	mc := memberlist.DefaultLANConfig()
	if err := encrypt(g, mc, cfg.Keys, g.log); err != nil {
		return nil, err
	}
	mc.Name = cfg.NodeID
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertiseAddr, mc.AdvertisePort = host, port
	mc.Delegate = (*delegate)(g)
	mc.Events = (*events)(g)
	// A node that left and comes back under the same name must be able to
	// reclaim it at once (a restarted agent), rather than wait out the
	// dead-node reclaim time.
	mc.DeadNodeReclaimTime = time.Second
	if ip := LocalIP(cfg.Addr); ip != nil {
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

// Join contacts the seeds until one answers or stop is closed.
func (g *Gossip) Join(seeds []string, stop <-chan struct{}) {
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

// Members returns the nodes currently alive or suspect, by ID.
func (g *Gossip) Members() map[string]*memberlist.Node {
	out := map[string]*memberlist.Node{}
	for _, n := range g.ml.Members() {
		out[n.Name] = n
	}
	return out
}

// Alive returns the alive members with their meta, sorted by ID.
func (g *Gossip) Alive() []Peer {
	var out []Peer
	for _, n := range g.ml.Members() {
		if n.State != memberlist.StateAlive {
			continue
		}
		var m Meta
		if json.Unmarshal(n.Meta, &m) != nil {
			continue
		}
		out = append(out, Peer{Info: meta.NodeInfo{ID: n.Name, RPC: m.RPC, Peer: m.Peer, HTTP: m.HTTP, Gossip: n.Address()}, Meta: m})
	}
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.Info.ID, b.Info.ID) })
	return out
}

// SetReady advertises the digest of the record this node would bootstrap
// with, and reports whether that changed what it advertises.
func (g *Gossip) SetReady(digest string) bool {
	g.mu.Lock()
	same := g.meta.Ready == digest
	g.meta.Ready = digest
	g.mu.Unlock()
	if !same {
		_ = g.ml.UpdateNode(time.Second)
	}
	return !same
}

// SetBootstrapped advertises that this node belongs to a bootstrapped
// cluster, with the seal of its bootstrap if it just took part in one.
func (g *Gossip) SetBootstrapped(seal string) {
	g.mu.Lock()
	g.meta.Bootstrapped = true
	g.meta.Seal = seal
	g.mu.Unlock()
	_ = g.ml.UpdateNode(time.Second)
}

// SetEpoch advertises the epoch of the record this node follows.
func (g *Gossip) SetEpoch(epoch uint64) {
	g.mu.Lock()
	same := g.meta.Epoch == epoch
	g.meta.Epoch = epoch
	g.mu.Unlock()
	if !same {
		_ = g.ml.UpdateNode(time.Second)
	}
}

// Changes returns a channel closed at the next membership change.
func (g *Gossip) Changes() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

func (g *Gossip) notify() {
	g.mu.Lock()
	close(g.changed)
	g.changed = make(chan struct{})
	g.mu.Unlock()
}

// Leave tells the others this node leaves, and stops.
func (g *Gossip) Leave() {
	_ = g.ml.Leave(2 * time.Second)
	_ = g.ml.Shutdown()
}

type delegate Gossip

func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _ := json.Marshal(d.meta)
	return b
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

type events Gossip

func (e *events) NotifyJoin(*memberlist.Node)   { (*Gossip)(e).notify() }
func (e *events) NotifyLeave(*memberlist.Node)  { (*Gossip)(e).notify() }
func (e *events) NotifyUpdate(*memberlist.Node) { (*Gossip)(e).notify() }

// Peer is one alive member as gossip shows it.
type Peer struct {
	Info meta.NodeInfo
	Meta Meta
}
