package security

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"time"
)

// CA is a certificate authority that can sign certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// PEM pairs are what the generators return: certificate and private key.
type PEM struct {
	Cert, Key []byte
}

// NewCA makes a self-signed CA (ECDSA P-256) valid for validity.
func NewCA(name string, validity time.Duration) (*CA, PEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, PEM{}, err
	}
	tmpl := template(name, validity)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, PEM{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, PEM{}, err
	}
	p, err := encode(der, key)
	return &CA{Cert: cert, Key: key}, p, err
}

// LoadCAKey reads a CA certificate and its key written by NewCA.
func LoadCAKey(certFile, keyFile string) (*CA, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || kblk == nil {
		return nil, fmt.Errorf("security: %s or %s is not PEM", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// IssueNode signs a certificate for node id, usable as server and client,
// valid for the given hosts (IP addresses or DNS names: what peers and
// clients dial).
func (ca *CA) IssueNode(id string, hosts []string, validity time.Duration) (PEM, error) {
	if id == "" {
		return PEM{}, errors.New("security: empty node id")
	}
	return ca.issue("quorate node "+id, NodeURI(id), hosts, validity,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
}

// IssueClient signs a client certificate; it never opens the peer port.
func (ca *CA) IssueClient(name string, validity time.Duration) (PEM, error) {
	return ca.issue("quorate client "+name, ClientURI(name), nil, validity,
		[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
}

func (ca *CA) issue(cn string, id *url.URL, hosts []string, validity time.Duration, usage []x509.ExtKeyUsage) (PEM, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	tmpl := template(cn, validity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = usage
	tmpl.URIs = []*url.URL{id}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return PEM{}, err
	}
	return encode(der, key)
}

func template(cn string, validity time.Duration) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"quorate"}},
		// Clocks of a cluster's machines differ a little.
		NotBefore: now.Add(-time.Hour),
		NotAfter:  now.Add(validity),
	}
}

func encode(der []byte, key *ecdsa.PrivateKey) (PEM, error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return PEM{}, err
	}
	return PEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

// Write writes the certificate (mode 0644) and key (0600) files.
func (p PEM) Write(certFile, keyFile string) error {
	if err := writeFile(keyFile, p.Key, 0o600); err != nil {
		return err
	}
	return writeFile(certFile, p.Cert, 0o644)
}

// writeFile replaces file atomically, so a node reloading it never reads
// half a certificate.
func writeFile(file string, b []byte, mode os.FileMode) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
