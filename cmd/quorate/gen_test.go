package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorate/quorate/security"
)

// TestGen: what quorate gen makes is what an agent loads: a node
// certificate with its identity, signed by the CA, and a token whose line
// a tokens file accepts.
func TestGen(t *testing.T) {
	dir := t.TempDir()
	if r := runCLI(t, "gen", "ca", "--out", dir); r.code != exitOK {
		t.Fatalf("gen ca: %d %s", r.code, r.stderr)
	}
	ca, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if r := runCLI(t, "gen", "node", "--ca-cert", ca, "--ca-key", key, "--id", "n7", "--hosts", "10.0.0.7", "--out", dir); r.code != exitOK {
		t.Fatalf("gen node: %d %s", r.code, r.stderr)
	}
	tl, err := security.LoadTLS(filepath.Join(dir, "n7.crt"), filepath.Join(dir, "n7.key"), ca)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := security.NodeID(tl.Leaf()); id != "n7" || len(tl.Leaf().IPAddresses) != 1 {
		t.Errorf("node certificate: id %q, IPs %v", id, tl.Leaf().IPAddresses)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key mode: %v %v", fi.Mode(), err)
	}

	r := runCLI(t, "gen", "token", "--name", "ci", "--scopes", "check,read")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != exitOK || len(lines) != 4 {
		t.Fatalf("gen token: %d %q", r.code, r.stdout)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(lines[3]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := security.LoadTokens(tokens)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := ts.Lookup(lines[1]); !ok || p.Name != "ci" || p.Scopes != security.ScopeCheck|security.ScopeRead {
		t.Errorf("the token's line: %v %v", p, ok)
	}
	if r := runCLI(t, "gen", "gossip-key"); r.code != exitOK {
		t.Errorf("gen gossip-key: %d", r.code)
	} else if _, err := security.ParseGossipKey(r.stdout); err != nil {
		t.Errorf("gen gossip-key made %q: %v", r.stdout, err)
	}
	for _, args := range [][]string{
		{"gen", "token", "--scopes", "write", "--name", "x"},
		{"gen", "node", "--id", "n1"},
	} {
		if r := runCLI(t, args...); r.code != exitUsage {
			t.Errorf("%q: exit %d; want %d", args, r.code, exitUsage)
		}
	}
}
