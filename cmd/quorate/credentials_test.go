package main

import (
	"strings"
	"testing"
)

// The client commands take their CA and token from the flags, then the
// environment, then ./data/credentials, in that order.
func TestCredentialLookup(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv(envCA, "")
	t.Setenv(envToken, "")
	var none credFlags
	if _, _, err := none.resolve(); err == nil || !strings.Contains(err.Error(), "--ca") {
		t.Fatalf("no CA anywhere: %v; want an error naming --ca", err)
	}
	dev := devCreds(devDataDir)
	if err := dev.Ensure([]string{"n1"}); err != nil {
		t.Fatal(err)
	}
	devTok, _ := dev.Token("operator")
	if ca, tok, err := none.resolve(); err != nil || ca != dev.CA() || tok != devTok {
		t.Errorf("from ./data: %q %q %v; want %q and the operator token", ca, tok, err, dev.CA())
	}
	t.Setenv(envCA, "/env/ca.crt")
	t.Setenv(envToken, "env-token")
	if ca, tok, _ := none.resolve(); ca != "/env/ca.crt" || tok != "env-token" {
		t.Errorf("from the environment: %q %q", ca, tok)
	}
	flags := credFlags{ca: "/flag/ca.crt", token: "flag-token"}
	if ca, tok, _ := flags.resolve(); ca != "/flag/ca.crt" || tok != "flag-token" {
		t.Errorf("from the flags: %q %q", ca, tok)
	}
	if opts, err := (&credFlags{plaintext: true}).dialOptions(); err != nil || len(opts) != 1 {
		t.Errorf("--plaintext: %d options, %v", len(opts), err)
	}
}
