package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/security"
)

// The environment the client commands read their credentials from, after
// their flags and before the dev cluster's directory.
const (
	envCA    = "QUORATE_CA"
	envToken = "QUORATE_TOKEN"
)

// devDataDir is where "quorate dev" (and make run) keep their data by
// default; the client commands look for its credentials there.
const devDataDir = "./data"

// devCreds is the credentials directory of the dev cluster whose data is in
// dataDir.
func devCreds(dataDir string) security.Dev {
	return security.Dev{Dir: filepath.Join(dataDir, "credentials")}
}

// devEnv is what a user exports to reach the dev cluster from anywhere.
func devEnv(d security.Dev) string {
	ca, err := filepath.Abs(d.CA())
	if err != nil {
		ca = d.CA()
	}
	tok, _ := d.Token("operator")
	return fmt.Sprintf("  export %s=%s\n  export %s=%s", envCA, ca, envToken, tok)
}

// credFlags are the client commands' credential flags.
type credFlags struct {
	ca        string
	token     string
	plaintext bool
}

func (c *credFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&c.ca, "ca", "", "CA certificate (PEM) the nodes' certificates are signed by (default: $"+envCA+", else "+devDataDir+"/credentials/ca.crt)")
	fl.StringVar(&c.token, "token", "", "bearer token (default: $"+envToken+", else "+devDataDir+"/credentials/operator.token)")
	fl.BoolVar(&c.plaintext, "plaintext", false, "connect without TLS and send no token (a plaintext test server or proxy; quorate nodes serve TLS only)")
}

// resolve finds the CA file and token the flags, the environment or the
// dev cluster's directory give, in that order.
func (c *credFlags) resolve() (caFile, token string, err error) {
	dev := devCreds(devDataDir)
	caFile = firstOf(c.ca, os.Getenv(envCA), existing(dev.CA()))
	if caFile == "" {
		return "", "", errors.New("--ca: no CA certificate to verify the nodes with: give --ca, set " + envCA +
			", or run from the directory holding quorate dev's ./data (README \"Security model\")")
	}
	token = firstOf(c.token, os.Getenv(envToken))
	if token == "" {
		if t, err := dev.Token("operator"); err == nil {
			token = t
		}
	}
	return caFile, token, nil
}

// dialOptions are the gRPC dial options the flags call for.
func (c *credFlags) dialOptions() ([]grpc.DialOption, error) {
	if c.plaintext {
		return []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, nil
	}
	caFile, token, err := c.resolve()
	if err != nil {
		return nil, err
	}
	ca, err := client.WithCAFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	opts := []grpc.DialOption{ca}
	if token != "" {
		opts = append(opts, client.WithToken(strings.TrimSpace(token)))
	}
	return opts, nil
}

// dial connects to the node at addr with the flags' credentials; its
// errors are already the CLI's (a usage error for bad credential flags).
func (c *credFlags) dial(addr string) (*client.Client, error) {
	opts, err := c.dialOptions()
	if err != nil {
		return nil, usageError(err)
	}
	cl, err := client.Dial(addr, opts...)
	if err != nil {
		return nil, failure(err)
	}
	return cl, nil
}

// httpToken is the token for a node's HTTP port (/metrics), "" if none.
func (c *credFlags) httpToken() string {
	if c.plaintext {
		return ""
	}
	_, token, _ := c.resolve()
	return token
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func existing(file string) string {
	if _, err := os.Stat(file); err != nil {
		return ""
	}
	return file
}
