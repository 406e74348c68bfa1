package security

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// TLS is a node's certificate, key and cluster CA, read from files and
// re-read by Reload, so certificates rotate without a restart: every
// handshake after a reload uses the new ones, and connections already open
// keep theirs.
type TLS struct {
	certFile, keyFile, caFile string

	cur atomic.Pointer[material]

	mu    sync.Mutex  // serializes Reload
	stamp []fileStamp // guarded by mu: the files as last loaded
}

type material struct {
	cert *tls.Certificate
	leaf *x509.Certificate
	pool *x509.CertPool
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// LoadTLS reads the node's certificate chain and key (PEM) and the CA
// bundle it trusts for peers and clients. The certificate must carry a node
// identity (NodeURI).
func LoadTLS(certFile, keyFile, caFile string) (*TLS, error) {
	t := &TLS{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload re-reads the files. On any error the credentials in use stay as
// they were.
func (t *TLS) Reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	stamp := t.stamps()
	cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
	if err != nil {
		return fmt.Errorf("security: --tls-cert %s, --tls-key %s: %w", t.certFile, t.keyFile, err)
	}
	if _, err := NodeID(cert.Leaf); err != nil {
		return fmt.Errorf("security: --tls-cert %s: %w", t.certFile, err)
	}
	pool, err := LoadCA(t.caFile)
	if err != nil {
		return err
	}
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("security: --tls-cert %s is not signed by --tls-ca %s: %w", t.certFile, t.caFile, err)
	}
	t.cur.Store(&material{cert: &cert, leaf: cert.Leaf, pool: pool})
	t.stamp = stamp
	return nil
}

// LoadCA reads a PEM bundle of CA certificates.
func LoadCA(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("security: CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("security: CA bundle %s holds no PEM certificate", file)
	}
	return pool, nil
}

func (t *TLS) stamps() []fileStamp {
	var out []fileStamp
	for _, f := range []string{t.certFile, t.keyFile, t.caFile} {
		var s fileStamp
		if fi, err := os.Stat(f); err == nil {
			s = fileStamp{mod: fi.ModTime(), size: fi.Size()}
		}
		out = append(out, s)
	}
	return out
}

// changed reports whether a file differs from when it was last loaded.
func (t *TLS) changed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.stamps()
	for i := range now {
		if i >= len(t.stamp) || now[i] != t.stamp[i] {
			return true
		}
	}
	return false
}

// Watch reloads when a file changes (checked every interval: certificate
// managers rotate mounted files without signalling anyone) and at each
// value from kick (SIGHUP), until ctx ends. Each reload's outcome goes to
// report.
func (t *TLS) Watch(ctx context.Context, interval time.Duration, kick <-chan os.Signal, report func(error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			report(t.Reload())
		case <-tick.C:
			if t.changed() {
				report(t.Reload())
			}
		}
	}
}

// Leaf is the node certificate in use.
func (t *TLS) Leaf() *x509.Certificate { return t.cur.Load().leaf }

// ServerConfig is the configuration of a listener. With peersOnly, a
// client must present a certificate signed by the CA that carries a node
// identity (the peer port); otherwise a client certificate is optional and
// verified when given (the public port, where tokens authenticate).
func (t *TLS) ServerConfig(peersOnly bool) *tls.Config {
	auth := tls.VerifyClientCertIfGiven
	if peersOnly {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Per handshake, so a reload takes effect for the next connection.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := t.cur.Load()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{*m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   auth,
				NextProtos:   []string{"h2"},
			}
			if peersOnly {
				c.VerifyConnection = requireNode
			}
			return c, nil
		},
	}
}

// PeerClientConfig is the configuration for dialling another node's peer
// port: this node's certificate as the client's, and a server that must be
// signed by the CA, match the dialled host, and carry a node identity.
func (t *TLS) PeerClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return t.cur.Load().cert, nil
		},
		// The standard verification reads a fixed RootCAs; VerifyConnection
		// below does the same checks against the CA loaded last.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := verifyServer(cs, t.cur.Load().pool); err != nil {
				return err
			}
			return requireNode(cs)
		},
	}
}

func verifyServer(cs tls.ConnectionState, pool *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("security: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, DNSName: cs.ServerName,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}

func requireNode(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return ErrNotNode
	}
	_, err := NodeID(cs.PeerCertificates[0])
	return err
}

// ClientConfig is the configuration of a client of the public port that
// trusts the CA bundle in caFile.
func ClientConfig(caFile string) (*tls.Config, error) {
	pool, err := LoadCA(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}, nil
}
