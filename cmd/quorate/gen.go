package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/security"
)

// genCmd makes credentials for a production cluster (README "Security
// model"); quorate dev makes its own.
func (a *app) genCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "Make credentials: a CA, node certificates, tokens, gossip keys",
		Long: `Make the credentials a cluster needs (README "Security model"). Keys are
written with mode 0600. Any CA works if its node certificates carry the URI
SAN spiffe://quorate/node/<node-id>; these commands are one way to get them.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.genCACmd(), a.genNodeCmd(), a.genTokenCmd(), a.genGossipKeyCmd())
	return cmd
}

func (a *app) genCACmd() *cobra.Command {
	var out string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:     "ca",
		Short:   "Make a CA (ECDSA P-256): ca.crt and ca.key in --out",
		Example: `  quorate gen ca --out ./pki`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := os.MkdirAll(out, 0o700); err != nil {
				return failure(err)
			}
			_, p, err := security.NewCA("quorate CA", validity)
			if err == nil {
				err = p.Write(filepath.Join(out, "ca.crt"), filepath.Join(out, "ca.key"))
			}
			if err != nil {
				return failure(err)
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s\n", filepath.Join(out, "ca.crt"), filepath.Join(out, "ca.key"))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", ".", "directory to write ca.crt and ca.key to")
	cmd.Flags().DurationVar(&validity, "validity", 5*365*24*time.Hour, "how long the CA is valid")
	return cmd
}

func (a *app) genNodeCmd() *cobra.Command {
	var caCert, caKey, id, out string
	var hosts []string
	var validity time.Duration
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Sign a node certificate: <id>.crt and <id>.key in --out",
		Long: `Sign a certificate for node --id with the CA: server and client use, the
node identity spiffe://quorate/node/<id>, and --hosts (every address and
name peers and clients dial: the --rpc and --peer hosts) as SANs.`,
		Example: `  quorate gen node --ca-cert pki/ca.crt --ca-key pki/ca.key --id n1 --hosts 10.0.0.1,n1.internal --out pki`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if id == "" || len(hosts) == 0 {
				return usageError(errors.New("--id and --hosts are required"))
			}
			ca, err := security.LoadCAKey(caCert, caKey)
			if err != nil {
				return usageError(fmt.Errorf("--ca-cert, --ca-key: %w", err))
			}
			p, err := ca.IssueNode(id, hosts, validity)
			if err == nil {
				err = p.Write(filepath.Join(out, id+".crt"), filepath.Join(out, id+".key"))
			}
			if err != nil {
				return failure(err)
			}
			fmt.Fprintf(a.stdout, "wrote %s and %s\n", filepath.Join(out, id+".crt"), filepath.Join(out, id+".key"))
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&caCert, "ca-cert", "ca.crt", "the CA's certificate")
	fl.StringVar(&caKey, "ca-key", "ca.key", "the CA's key")
	fl.StringVar(&id, "id", "", "the node's --node-id (required)")
	fl.StringSliceVar(&hosts, "hosts", nil, "IP addresses and DNS names the node is dialled at (required)")
	fl.StringVar(&out, "out", ".", "directory to write the files to")
	fl.DurationVar(&validity, "validity", 365*24*time.Hour, "how long the certificate is valid")
	return cmd
}

func (a *app) genTokenCmd() *cobra.Command {
	var name, scopes string
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make a token and its --tokens-file line",
		Long: `Make a random token. The token goes to the client (--token or
QUORATE_TOKEN); the line, which holds only its sha256, goes into every
node's --tokens-file (then send the nodes SIGHUP).`,
		Example: `  quorate gen token --name checkout-service --scopes check
  quorate gen token --name prometheus --scopes read`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			s, err := security.ParseScopes(scopes)
			if err != nil {
				return usageError(fmt.Errorf("--scopes: %w", err))
			}
			if name == "" || strings.ContainsAny(name, " \t\n") {
				return usageError(errors.New("--name: required, without spaces"))
			}
			tok := security.NewToken()
			fmt.Fprintf(a.stdout, "# the token, for the client:\n%s\n# the line for every node's --tokens-file:\n%s\n", tok, security.TokenLine(name, s, tok))
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "who holds the token; named in the audit log (required)")
	cmd.Flags().StringVar(&scopes, "scopes", "check", "comma-separated: check, read, admin")
	return cmd
}

func (a *app) genGossipKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gossip-key",
		Short: "Make a gossip encryption key (32 bytes, base64)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(a.stdout, security.NewGossipKey())
			return nil
		},
	}
}
