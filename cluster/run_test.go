package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/localcluster"
	"github.com/quorate/quorate/security"
)

// TestRunReturnsStartError: a node that cannot start (its cluster record
// on disk is malformed) stops its servers and returns why, rather than
// serving on with nothing to serve.
func TestRunReturnsStartError(t *testing.T) {
	dir := t.TempDir()
	creds := security.Dev{Dir: filepath.Join(dir, "credentials")}
	if err := creds.Ensure([]string{"n1"}); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "n1")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "cluster.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	ports, err := localcluster.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return localcluster.Loopback(ports[i]) }
	cfg := Config{NodeID: "n1", DataDir: data, RPCAddr: addr(0), PeerAddr: addr(1), HTTPAddr: addr(2), GossipAddr: addr(3),
		BootstrapExpect: 1, Security: SecurityConfig{TLSCert: creds.NodeCert("n1"), TLSKey: creds.NodeKey("n1"), TLSCA: creds.CA(), GossipKeyring: creds.Keyring()}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), recordFile) {
			t.Fatalf("Run: %v, want the malformed %s", err, recordFile)
		}
		if testing.Verbose() {
			t.Log(err)
		}
	case <-ctx.Done():
		t.Fatal(fmt.Errorf("Run still serving 30s after its start failed"))
	}
}
