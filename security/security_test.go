package security

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseTokens(t *testing.T) {
	h := sha256.Sum256([]byte("secret"))
	hash := hex.EncodeToString(h[:])
	good := "# comment\n\nci check " + hash + "\n"
	m, err := ParseTokens([]byte(good))
	if err != nil || len(m) != 1 || m[h] != (Principal{Name: "ci", Scopes: ScopeCheck}) {
		t.Fatalf("ParseTokens(good) = %v, %v", m, err)
	}
	h2 := sha256.Sum256([]byte("other"))
	hash2 := hex.EncodeToString(h2[:])
	for _, tt := range []struct{ in, want string }{
		{"ci check", "line 1: want <name> <scopes> <sha256 hex>"},
		{"ci write " + hash, `line 1: unknown scope "write"`},
		{"ci check,,read " + hash, `unknown scope ""`},
		{"ci check abc", "64 hex digits"},
		{"ci check " + hash + "\nci read " + hash2, `line 2: name "ci" used twice`},
		{"a check " + hash + "\nb read " + hash, "line 2: the same token hash appears twice"},
		{strings.Repeat("x", 65) + " check " + hash, "at most 64"},
	} {
		if _, err := ParseTokens([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrTokens) {
			t.Errorf("ParseTokens(%q) = %v; want an error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestTokensLookupAndReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens")
	tok := NewToken()
	if err := os.WriteFile(file, []byte(TokenLine("ops", ScopeRead|ScopeAdmin, tok)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := LoadTokens(file)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := ts.Lookup(tok); !ok || p.Name != "ops" || p.Scopes != ScopeRead|ScopeAdmin {
		t.Errorf("Lookup = %v, %v", p, ok)
	}
	if _, ok := ts.Lookup(tok + "x"); ok {
		t.Error("a different token was accepted")
	}
	// A broken file keeps the tokens in use; a good one replaces them.
	if err := os.WriteFile(file, []byte("broken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err == nil {
		t.Error("reload of a broken file succeeded")
	}
	if _, ok := ts.Lookup(tok); !ok {
		t.Error("a failed reload dropped the tokens")
	}
	tok2 := NewToken()
	if err := os.WriteFile(file, []byte(TokenLine("ci", ScopeCheck, tok2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, ok := ts.Lookup(tok); ok {
		t.Error("a removed token still works after reload")
	}
	if p, ok := ts.Lookup(tok2); !ok || p.Scopes != ScopeCheck {
		t.Errorf("the new token: %v, %v", p, ok)
	}
}

func TestParseKeyring(t *testing.T) {
	k1, k2 := NewGossipKey(), "AAAAAAAAAAAAAAAAAAAAAA==" // 32 and 16 bytes
	keys, err := ParseKeyring([]byte("# primary first\n" + k1 + "\n\n" + k2 + "\n"))
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("ParseKeyring = %d keys, %v", len(keys), err)
	}
	for _, tt := range []struct{ in, want string }{
		{"", "holds no key"},
		{"not base64!", "line 1"},
		{"AAAA", "3 bytes, want 16, 24 or 32"},
		{strings.Repeat(k1+"\n", 17), "more than 16"},
	} {
		if _, err := ParseKeyring([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseKeyring(%q) = %v; want %q", tt.in, err, tt.want)
		}
	}
}

// devTLS makes a Dev directory for node n1 and loads its TLS material.
func devTLS(t *testing.T) (Dev, *TLS) {
	t.Helper()
	d := Dev{Dir: t.TempDir()}
	if err := d.Ensure([]string{"n1"}); err != nil {
		t.Fatal(err)
	}
	tl, err := LoadTLS(d.NodeCert("n1"), d.NodeKey("n1"), d.CA())
	if err != nil {
		t.Fatal(err)
	}
	return d, tl
}

func TestLoadTLSRefuses(t *testing.T) {
	d, _ := devTLS(t)
	ca, err := LoadCAKey(d.CA(), d.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// A client certificate of the right CA is not a node's.
	p, _ := ca.IssueClient("alice", time.Hour)
	if err := p.Write(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTLS(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"), d.CA()); !errors.Is(err, ErrNotNode) {
		t.Errorf("a client certificate as a node's: %v", err)
	}
	// A node certificate of another CA.
	other, _, _ := NewCA("other", time.Hour)
	p, _ = other.IssueNode("n1", nil, time.Hour)
	if err := p.Write(filepath.Join(dir, "o.crt"), filepath.Join(dir, "o.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTLS(filepath.Join(dir, "o.crt"), filepath.Join(dir, "o.key"), d.CA()); err == nil || !strings.Contains(err.Error(), "not signed by --tls-ca") {
		t.Errorf("a certificate of another CA: %v", err)
	}
}

// TestWatchReloadsChangedFiles: a rotated certificate file is picked up by
// the poll, without a signal.
func TestWatchReloadsChangedFiles(t *testing.T) {
	d, tl := devTLS(t)
	before := tl.Leaf().SerialNumber.String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloaded := make(chan error, 4)
	go tl.Watch(ctx, 10*time.Millisecond, nil, func(err error) { reloaded <- err })
	ca, err := LoadCAKey(d.CA(), d.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ca.IssueNode("n1", []string{"127.0.0.1"}, time.Hour)
	// Written a second later than the first, so the stamp differs even on
	// a filesystem with coarse times (the size may not).
	future := time.Now().Add(time.Second)
	if err := p.Write(d.NodeCert("n1"), d.NodeKey("n1")); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(d.NodeCert("n1"), future, future)
	select {
	case err := <-reloaded:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no reload after the certificate file changed")
	}
	if tl.Leaf().SerialNumber.String() == before {
		t.Error("the reload kept the old certificate")
	}
}

func TestNodeID(t *testing.T) {
	d, tl := devTLS(t)
	if id, err := NodeID(tl.Leaf()); err != nil || id != "n1" {
		t.Errorf("NodeID = %q, %v", id, err)
	}
	ca, _ := LoadCAKey(d.CA(), d.CAKey())
	p, _ := ca.IssueClient("n1", time.Hour)
	dir := t.TempDir()
	_ = p.Write(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"))
	c, err := loadLeaf(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NodeID(c); !errors.Is(err, ErrNotNode) {
		t.Errorf("a client certificate named n1 passes as node: %v", err)
	}
}

func FuzzParseTokens(f *testing.F) {
	f.Add([]byte("ci check " + strings.Repeat("ab", 32) + "\n# x\n"))
	f.Add([]byte("a check,read,admin " + strings.Repeat("0", 64)))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseTokens(b)
		if err != nil {
			return
		}
		names := map[string]bool{}
		for _, p := range m {
			if p.Name == "" || names[p.Name] || p.Scopes == 0 || p.Scopes > ScopeCheck|ScopeRead|ScopeAdmin {
				t.Fatalf("accepted %+v", p)
			}
			names[p.Name] = true
		}
	})
}

func FuzzParseKeyring(f *testing.F) {
	f.Add([]byte(NewGossipKey() + "\n"))
	f.Add([]byte("#\nAAAAAAAAAAAAAAAAAAAAAA==\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseKeyring(b)
		if err != nil {
			return
		}
		if len(keys) == 0 || len(keys) > maxKeyring {
			t.Fatalf("%d keys", len(keys))
		}
		for _, k := range keys {
			if l := len(k); l != 16 && l != 24 && l != 32 {
				t.Fatalf("a key of %d bytes", l)
			}
		}
	})
}

func loadLeaf(certFile, keyFile string) (*x509.Certificate, error) {
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return c.Leaf, nil
}
