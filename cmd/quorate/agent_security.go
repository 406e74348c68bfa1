package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/quorate/quorate/cluster"
)

// securityFlags are the agent's credential flags (README "Security model").
type securityFlags struct {
	peerAddr      string
	tlsCert       string
	tlsKey        string
	tlsCA         string
	tokensFile    string
	gossipKeys    []string
	gossipKeyring string
	pprof         bool
}

func (f *securityFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.peerAddr, "peer", "127.0.0.1:7601", "peer address, host:port: forwarding and Raft, served only to nodes presenting a certificate of --tls-ca with a node identity; not 0.0.0.0")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "this node's certificate (PEM), with the URI SAN spiffe://quorate/node/<node-id>; re-read on SIGHUP and when it changes (required)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "the key of --tls-cert (PEM) (required)")
	fl.StringVar(&f.tlsCA, "tls-ca", "", "CA bundle (PEM) that peers' and clients' certificates must be signed by (required)")
	fl.StringVar(&f.tokensFile, "tokens-file", "", "client tokens: lines of <name> <scopes> <sha256 hex>; without it only loopback checks are served; re-read on SIGHUP")
	fl.StringArrayVar(&f.gossipKeys, "gossip-key", nil, "gossip encryption key, base64 of 16, 24 or 32 bytes; repeat to rotate, the primary first (this or --gossip-keyring is required)")
	fl.StringVar(&f.gossipKeyring, "gossip-keyring", "", "file of gossip keys, one base64 key a line, the primary first; re-read on SIGHUP (rotation)")
	fl.BoolVar(&f.pprof, "pprof", false, "serve /debug/pprof on the HTTP port, to admin tokens")
}

// apply sets cfg's security fields from the flags.
func (f *securityFlags) apply(cfg *cluster.Config) {
	cfg.PeerAddr = f.peerAddr
	cfg.Security = cluster.SecurityConfig{
		TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSCA: f.tlsCA,
		TokensFile: f.tokensFile, GossipKeys: f.gossipKeys, GossipKeyring: f.gossipKeyring, Pprof: f.pprof,
	}
}

// reloadSignal is the channel SIGHUP arrives on: the node re-reads its
// certificates and tokens.
func reloadSignal() <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch
}
