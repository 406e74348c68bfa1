package security

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// A certificate names whom it belongs to in a URI SAN, in the SPIFFE
// style: spiffe://quorate/node/<id> for a node, spiffe://quorate/client/<name>
// for anything else. Only a node identity opens the peer port; the CA alone
// proves nothing, since an operator may sign client certificates with it.
const (
	trustDomain  = "quorate"
	nodePrefix   = "/node/"
	clientPrefix = "/client/"
)

// Errors about identities.
var (
	ErrNotNode = errors.New("security: certificate carries no node identity (URI SAN spiffe://quorate/node/<id>)")
)

// NodeURI is the identity a node's certificate carries.
func NodeURI(id string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: nodePrefix + id}
}

// ClientURI is the identity of a client certificate, which never opens the
// peer port.
func ClientURI(name string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: clientPrefix + name}
}

// NodeID returns the node id cert names, or ErrNotNode.
func NodeID(cert *x509.Certificate) (string, error) {
	for _, u := range cert.URIs {
		if u.Scheme != "spiffe" || u.Host != trustDomain {
			continue
		}
		if id, ok := strings.CutPrefix(u.Path, nodePrefix); ok && id != "" && !strings.Contains(id, "/") {
			return id, nil
		}
	}
	return "", ErrNotNode
}

// CheckPeerNode refuses a peer's message whose header names another node
// (id) than the certificate of the connection it came on: a node's
// certificate lets it speak for itself only, so one stolen certificate
// cannot impersonate the leader (issue 13's "leader-id=mallory").
func CheckPeerNode(ctx context.Context, id string) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return errors.New("no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return errors.New("the connection has no client certificate")
	}
	cert, err := NodeID(ti.State.PeerCertificates[0])
	if err != nil {
		return err
	}
	if id != cert {
		return fmt.Errorf("the message claims to come from node %q, but the connection's certificate is node %q's", id, cert)
	}
	return nil
}
