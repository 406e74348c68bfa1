package security

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Dev is the credentials directory of a development or test cluster, as
// quorate dev and the test harnesses lay it out: a CA, a certificate per
// node, a tokens file with a token per role, and a gossip keyring.
type Dev struct {
	Dir string
	// Hosts are more addresses node certificates are made valid for, beside
	// the loopback ones: where nodes listen off 127.0.0.1.
	Hosts []string
}

// devValidity is long enough that a dev cluster never sees expiry.
const devValidity = 10 * 365 * 24 * time.Hour

// The dev tokens, by file name (without ".token") and scopes.
var devTokens = []struct {
	name   string
	scopes Scope
}{
	{"operator", ScopeCheck | ScopeRead | ScopeAdmin}, // what the CLI uses
	{"app", ScopeCheck},
	{"prometheus", ScopeRead},
	{"gateway", ScopeCheck | ScopeLease}, // an embedded limiter (client.Embedded)
}

// Paths of the files in a Dev directory.
func (d Dev) CA() string                { return filepath.Join(d.Dir, "ca.crt") }
func (d Dev) CAKey() string             { return filepath.Join(d.Dir, "ca.key") }
func (d Dev) NodeCert(id string) string { return filepath.Join(d.Dir, id+".crt") }
func (d Dev) NodeKey(id string) string  { return filepath.Join(d.Dir, id+".key") }
func (d Dev) Tokens() string            { return filepath.Join(d.Dir, "tokens") }
func (d Dev) Keyring() string           { return filepath.Join(d.Dir, "gossip.keyring") }

// TokenFile holds the plain token of one dev role (operator, app, prometheus).
func (d Dev) TokenFile(role string) string { return filepath.Join(d.Dir, role+".token") }

// Token reads the plain token of a dev role.
func (d Dev) Token(role string) (string, error) {
	b, err := os.ReadFile(d.TokenFile(role))
	return strings.TrimSpace(string(b)), err
}

// AgentArgs are the credential flags of node id's agent.
func (d Dev) AgentArgs(id string) []string {
	return []string{
		"--tls-cert", d.NodeCert(id), "--tls-key", d.NodeKey(id), "--tls-ca", d.CA(),
		"--tokens-file", d.Tokens(), "--gossip-keyring", d.Keyring(),
	}
}

// Ensure creates whatever is missing: the CA, a certificate for each node
// (valid for the loopback addresses and localhost), the tokens and the
// keyring. What exists is kept, so a restarted dev cluster keeps its
// credentials and the tokens users exported.
func (d Dev) Ensure(nodes []string) error {
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return err
	}
	ca, err := d.ensureCA()
	if err != nil {
		return err
	}
	for _, id := range nodes {
		if exists(d.NodeCert(id)) && exists(d.NodeKey(id)) {
			continue
		}
		p, err := ca.IssueNode(id, append([]string{"127.0.0.1", "::1", "localhost"}, d.Hosts...), devValidity)
		if err != nil {
			return err
		}
		if err := p.Write(d.NodeCert(id), d.NodeKey(id)); err != nil {
			return err
		}
	}
	if err := d.ensureTokens(); err != nil {
		return err
	}
	if exists(d.Keyring()) {
		return nil
	}
	return writeFile(d.Keyring(), []byte(NewGossipKey()+"\n"), 0o600)
}

func (d Dev) ensureCA() (*CA, error) {
	if exists(d.CA()) && exists(d.CAKey()) {
		return LoadCAKey(d.CA(), d.CAKey())
	}
	ca, p, err := NewCA("quorate dev CA", devValidity)
	if err != nil {
		return nil, err
	}
	return ca, p.Write(d.CA(), d.CAKey())
}

func (d Dev) ensureTokens() error {
	var b strings.Builder
	old, err := os.ReadFile(d.Tokens())
	fresh := err != nil
	if fresh {
		b.WriteString("# quorate dev tokens: <name> <scopes> <sha256 of the token>. The plain\n# tokens are in the <name>.token files beside this one.\n")
	} else {
		b.Write(old)
	}
	added := false
	for _, t := range devTokens {
		// A role a newer version added gets its token in an older
		// directory; existing tokens are kept.
		if !fresh && exists(d.TokenFile(t.name)) {
			continue
		}
		tok := NewToken()
		if err := writeFile(d.TokenFile(t.name), []byte(tok+"\n"), 0o600); err != nil {
			return err
		}
		fmt.Fprintln(&b, TokenLine(t.name, t.scopes, tok))
		added = true
	}
	if !added {
		return nil
	}
	return writeFile(d.Tokens(), []byte(b.String()), 0o600)
}

func exists(file string) bool {
	_, err := os.Stat(file)
	return !errors.Is(err, os.ErrNotExist)
}
