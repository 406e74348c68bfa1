package security

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// Scope is what a token may do.
type Scope uint8

// The scopes. They do not imply each other: a token gets each it needs.
const (
	// ScopeCheck: RateLimiter.Check and CheckStream, and Admin.Status (the
	// routed client learns the topology from it).
	ScopeCheck Scope = 1 << iota
	// ScopeRead: Admin.Status and HTTP /metrics.
	ScopeRead
	// ScopeAdmin: administrative RPCs and /debug/pprof; every use is logged.
	ScopeAdmin
	// ScopeLease: the Gateway service, for limiters embedded in gateways:
	// watching the routing and policy set, and submitting bucket and lease
	// operations to shards. A holder of it can take, refund and lease
	// budget of any bucket, and strands what it leases if it dies: give it
	// to your gateways, never to tenants.
	ScopeLease
)

var scopeNames = []struct {
	s    Scope
	name string
}{{ScopeCheck, "check"}, {ScopeRead, "read"}, {ScopeAdmin, "admin"}, {ScopeLease, "lease"}}

func (s Scope) String() string {
	var names []string
	for _, n := range scopeNames {
		if s&n.s != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// ParseScopes reads a comma-separated list of scope names.
func ParseScopes(list string) (Scope, error) {
	var s Scope
	for _, name := range strings.Split(list, ",") {
		found := false
		for _, n := range scopeNames {
			if n.name == name {
				s, found = s|n.s, true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown scope %q (want check, read, admin or lease)", name)
		}
	}
	return s, nil
}

// Principal is whoever presented a token: the name its line in the tokens
// file gives, and its scopes.
type Principal struct {
	Name   string
	Scopes Scope
}

type principalKey struct{}

// WithPrincipal records who an authorized call is from, for the audit
// fields of what it changes.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalName names the caller of an authorized call ("" for a call
// that no authorizer saw, such as a test's).
func PrincipalName(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p.Name
}

// Bounds of a tokens file: it is read at start and on every reload.
const (
	maxTokens     = 10000
	maxTokenName  = 64
	maxTokensFile = 4 << 20
)

// ErrTokens prefixes every error about a tokens file.
var ErrTokens = errors.New("security: tokens file")

// ParseTokens reads a tokens file: one token a line, as
//
//	<name> <scopes> <sha256 of the token, hex>
//
// with scopes comma-separated (check,read,admin). Blank lines and lines
// starting with # are ignored. The file holds hashes only, so reading it
// does not reveal a token.
func ParseTokens(b []byte) (map[[32]byte]Principal, error) {
	if len(b) > maxTokensFile {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrTokens, maxTokensFile)
	}
	out := map[[32]byte]Principal{}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxTokensFile)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		p, h, err := parseTokenLine(text)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrTokens, line, err)
		}
		if names[p.Name] {
			return nil, fmt.Errorf("%w: line %d: name %q used twice", ErrTokens, line, p.Name)
		}
		if _, dup := out[h]; dup {
			return nil, fmt.Errorf("%w: line %d: the same token hash appears twice", ErrTokens, line)
		}
		if len(out) == maxTokens {
			return nil, fmt.Errorf("%w: more than %d tokens", ErrTokens, maxTokens)
		}
		names[p.Name] = true
		out[h] = p
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokens, err)
	}
	return out, nil
}

func parseTokenLine(text string) (Principal, [32]byte, error) {
	var h [32]byte
	f := strings.Fields(text)
	if len(f) != 3 {
		return Principal{}, h, errors.New("want <name> <scopes> <sha256 hex>")
	}
	if len(f[0]) > maxTokenName || !printable(f[0]) {
		return Principal{}, h, fmt.Errorf("name must be at most %d printable ASCII characters", maxTokenName)
	}
	s, err := ParseScopes(f[1])
	if err != nil {
		return Principal{}, h, err
	}
	raw, err := hex.DecodeString(f[2])
	if err != nil || len(raw) != len(h) {
		return Principal{}, h, errors.New("the hash must be 64 hex digits (sha256 of the token)")
	}
	copy(h[:], raw)
	return Principal{Name: f[0], Scopes: s}, h, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Tokens is a tokens file, re-read by Reload (add a token, switch clients to
// it, remove the old one, reload after each step).
type Tokens struct {
	file string
	cur  atomic.Pointer[map[[32]byte]Principal]
	mu   sync.Mutex // serializes Reload
}

// LoadTokens reads a tokens file.
func LoadTokens(file string) (*Tokens, error) {
	t := &Tokens{file: file}
	return t, t.Reload()
}

// Reload re-reads the file; on error the tokens in use stay.
func (t *Tokens) Reload() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, err := os.ReadFile(t.file)
	if err != nil {
		return fmt.Errorf("%w: --tokens-file: %v", ErrTokens, err)
	}
	m, err := ParseTokens(b)
	if err != nil {
		return fmt.Errorf("--tokens-file %s: %w", t.file, err)
	}
	t.cur.Store(&m)
	return nil
}

// Lookup returns whom token belongs to.
func (t *Tokens) Lookup(token string) (Principal, bool) {
	p, ok := (*t.cur.Load())[sha256.Sum256([]byte(token))]
	return p, ok
}

// NewToken returns a fresh random token.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "qrt_" + base64.RawURLEncoding.EncodeToString(b)
}

// TokenLine is token's line in a tokens file.
func TokenLine(name string, scopes Scope, token string) string {
	h := sha256.Sum256([]byte(token))
	return fmt.Sprintf("%s %s %s", name, scopes, hex.EncodeToString(h[:]))
}
