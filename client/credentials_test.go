package client

import (
	"os"
	"path/filepath"
	"testing"
)

// A token is never sent over a connection without TLS: gRPC refuses the
// dial options outright.
func TestTokenNeedsTLS(t *testing.T) {
	if c, err := Dial("127.0.0.1:1", WithToken("qrt_secret")); err == nil {
		c.Close()
		t.Fatal("a token was accepted on a plaintext connection")
	}
}

func TestWithCAFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := WithCAFile(filepath.Join(dir, "missing.crt")); err == nil {
		t.Error("a missing CA file was accepted")
	}
	bad := filepath.Join(dir, "bad.crt")
	if err := os.WriteFile(bad, []byte("not PEM"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WithCAFile(bad); err == nil {
		t.Error("a CA file without a certificate was accepted")
	}
}
