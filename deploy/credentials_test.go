package deploy

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/quorate/quorate/security"
)

// makeCredentials runs deploy/credentials.sh into dir with the built
// binary, as the compose service and make-secret.sh do.
func makeCredentials(t *testing.T, dir string, nodes ...string) string {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"credentials.sh", dir}, nodes...)...)
	cmd.Env = append(os.Environ(), "QUORATE="+quorateBinary(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("credentials.sh %s %v: %v\n%s", dir, nodes, err, out)
	}
	return string(out)
}

// certSANs reads a PEM certificate's DNS and IP SANs and its node identity.
func certSANs(t *testing.T, file string) (hosts []string, node string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: no PEM block", file)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	hosts = append(hosts, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		hosts = append(hosts, ip.String())
	}
	node, err = security.NodeID(c)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return hosts, node
}

func TestCredentialsScript(t *testing.T) {
	dir := t.TempDir()
	makeCredentials(t, dir, "n1=n1.example,127.0.0.1", "n2")

	for _, f := range []string{"ca.crt", "n1.crt", "n1.key", "n2.crt", "n2.key", "tokens", "gossip.keyring", "ca/ca.key"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	hosts, id := certSANs(t, filepath.Join(dir, "n1.crt"))
	if id != "n1" || !slices.Equal(hosts, []string{"n1.example", "127.0.0.1"}) {
		t.Errorf("n1.crt: node %q, SANs %v; want n1 with n1.example, 127.0.0.1", id, hosts)
	}
	if hosts, id := certSANs(t, filepath.Join(dir, "n2.crt")); id != "n2" || !slices.Equal(hosts, []string{"n2"}) {
		t.Errorf("n2.crt: node %q, SANs %v; want n2 valid for n2 (the default)", id, hosts)
	}
	if _, err := security.LoadKeyring(filepath.Join(dir, "gossip.keyring")); err != nil {
		t.Error(err)
	}
	checkTokens(t, dir)

	// A complete set is kept: no rotation on restart.
	before, _ := os.ReadFile(filepath.Join(dir, "tokens"))
	if out := makeCredentials(t, dir, "n1", "n2", "n3"); !strings.Contains(out, "kept") {
		t.Errorf("a second run said %q; want it to keep the set", out)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "tokens")); string(after) != string(before) {
		t.Error("a second run changed the tokens")
	}

	// A set cut short (no completion mark) is made again, whole.
	os.Remove(filepath.Join(dir, ".complete"))
	os.Remove(filepath.Join(dir, "n2.key"))
	makeCredentials(t, dir, "n1", "n2")
	if _, err := os.Stat(filepath.Join(dir, "n2.key")); err != nil {
		t.Errorf("after a run cut short: %v", err)
	}
	checkTokens(t, dir)
}

// checkTokens: the tokens file parses as the agent reads it, and each plain
// client token is in it with its role's scopes.
func checkTokens(t *testing.T, dir string) {
	t.Helper()
	tokens, err := security.LoadTokens(filepath.Join(dir, "tokens"))
	if err != nil {
		t.Fatal(err)
	}
	for role, scopes := range map[string]security.Scope{
		"operator":   security.ScopeCheck | security.ScopeRead | security.ScopeAdmin,
		"app":        security.ScopeCheck,
		"prometheus": security.ScopeRead,
		"gateway":    security.ScopeCheck | security.ScopeLease,
	} {
		b, err := os.ReadFile(filepath.Join(dir, "clients", role+".token"))
		if err != nil {
			t.Error(err)
			continue
		}
		tok := strings.TrimSpace(string(b))
		p, ok := tokens.Lookup(tok)
		if !ok || p.Name != role || p.Scopes != scopes {
			sum := sha256.Sum256([]byte(tok))
			t.Errorf("token of %s (sha256 %s): principal %+v, found %v; want %s with scopes %v", role, hex.EncodeToString(sum[:]), p, ok, role, scopes)
		}
	}
}

func TestCredentialsScriptUsage(t *testing.T) {
	cmd := exec.Command("sh", "credentials.sh", t.TempDir())
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage:") {
		t.Errorf("credentials.sh without nodes: %v, %q; want exit 2 with the usage", err, out)
	}
}
