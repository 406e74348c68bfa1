package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quorate/quorate/security"
)

// SecurityConfig is what a node authenticates with and what it asks of
// others (README "Security model").
type SecurityConfig struct {
	// TLSCert and TLSKey are the node's certificate (it must carry the node
	// identity, spiffe://quorate/node/<id>) and key, presented on both gRPC
	// listeners and when dialling peers; TLSCA is the CA bundle peers and
	// client certificates are verified against. All three are required.
	TLSCert, TLSKey, TLSCA string
	// TokensFile lists the tokens clients may present, with their scopes
	// (security.ParseTokens). Without it, checks are served to loopback
	// callers only and nothing else is served to anyone.
	TokensFile string
	// GossipKeys (base64, the primary first) or GossipKeyring (a file of
	// them) encrypt gossip; one is required.
	GossipKeys    []string
	GossipKeyring string
	// Pprof serves /debug/pprof on the HTTP port, to admin tokens.
	Pprof bool
	// Audit receives a line for every admin action, naming the token used
	// (default: Logger). Give it a logger that --log-level does not quiet.
	Audit *slog.Logger
	// Reload re-reads the certificates, the tokens file and the gossip
	// keyring file at each value (the agent sends SIGHUP here). They are
	// also re-read when the certificate files change.
	Reload <-chan os.Signal
}

// credsPollInterval is how often a node looks for rotated credential files.
const credsPollInterval = 10 * time.Second

func (s *SecurityConfig) validate() error {
	if s.TLSCert == "" || s.TLSKey == "" || s.TLSCA == "" {
		return fmt.Errorf("%w: --tls-cert, --tls-key and --tls-ca are required: a node serves only TLS, and its peer port only to nodes "+
			"of its CA. For a local cluster run \"quorate dev\", which makes them; for production see the README's \"Security model\"", ErrConfig)
	}
	if len(s.GossipKeys) == 0 && s.GossipKeyring == "" {
		return fmt.Errorf("%w: --gossip-key or --gossip-keyring is required: gossip is encrypted (\"quorate gen gossip-key\" makes a key; README \"Security model\")", ErrConfig)
	}
	if len(s.GossipKeys) > 0 && s.GossipKeyring != "" {
		return fmt.Errorf("%w: give --gossip-key or --gossip-keyring, not both", ErrConfig)
	}
	return nil
}

// nodeSecurity is a node's loaded credentials and what serves with them.
type nodeSecurity struct {
	tls        *security.TLS
	gossipKeys [][]byte
	tokens     *security.Tokens // nil without a tokens file
	audit      *slog.Logger     // a line for every change of who may do what
	peer       *grpc.Server     // the peer port's server
}

// loadSecurity reads every credential file, so that a node with bad ones
// refuses to start instead of failing its first handshake.
func loadSecurity(cfg *Config) (*nodeSecurity, error) {
	s := &nodeSecurity{}
	var err error
	if s.tls, err = security.LoadTLS(cfg.Security.TLSCert, cfg.Security.TLSKey, cfg.Security.TLSCA); err != nil {
		return nil, err
	}
	if id, _ := security.NodeID(s.tls.Leaf()); id != cfg.NodeID {
		return nil, fmt.Errorf("cluster: --tls-cert names node %q, but --node-id is %q", id, cfg.NodeID)
	}
	if s.gossipKeys, err = gossipKeys(&cfg.Security); err != nil {
		return nil, err
	}
	if cfg.Security.TokensFile != "" {
		if s.tokens, err = security.LoadTokens(cfg.Security.TokensFile); err != nil {
			return nil, err
		}
	}
	audit := cfg.Security.Audit
	if audit == nil {
		audit = cfg.Logger
	}
	s.audit = audit.With("node", cfg.NodeID)
	return s, nil
}

func gossipKeys(s *SecurityConfig) ([][]byte, error) {
	if s.GossipKeyring != "" {
		return security.LoadKeyring(s.GossipKeyring)
	}
	var keys [][]byte
	for _, k := range s.GossipKeys {
		b, err := security.ParseGossipKey(k)
		if err != nil {
			return nil, fmt.Errorf("--gossip-key: %w", err)
		}
		keys = append(keys, b)
	}
	return keys, nil
}

// publicCreds are the public gRPC server's TLS credentials; the front
// end authorizes callers.
func (s *nodeSecurity) publicCreds() grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(s.tls.ServerConfig(false)))
}

// peerDialOption is how a node dials its peers' peer ports.
func (s *nodeSecurity) peerDialOption() grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(s.tls.PeerClientConfig()))
}

// watchSecurity reloads the credentials on SIGHUP and when the certificate
// files change, logging each outcome to the audit log: who may do what
// changed.
func (n *Node) watchSecurity(ctx context.Context) {
	n.sec.tls.Watch(ctx, credsPollInterval, n.cfg.Security.Reload, func(err error) {
		if err == nil && n.sec.tokens != nil {
			err = n.sec.tokens.Reload()
		}
		if err == nil && n.cfg.Security.GossipKeyring != "" {
			err = n.reloadGossipKeys()
		}
		if err != nil {
			n.sec.audit.Error("audit: reloading credentials failed; the ones loaded before stay in use", "err", err)
			return
		}
		leaf := n.sec.tls.Leaf()
		n.sec.audit.Info("audit: credentials reloaded", "cert_serial", leaf.SerialNumber.Text(16), "not_after", leaf.NotAfter)
	})
}

// reloadGossipKeys installs the keyring file's keys, the first as primary.
func (n *Node) reloadGossipKeys() error {
	keys, err := security.LoadKeyring(n.cfg.Security.GossipKeyring)
	if err != nil {
		return err
	}
	return n.gossip.SetKeys(keys)
}
