package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/envoyconf"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

type importFlags struct {
	applyFlags
	envoy     string
	algorithm string
}

func (a *app) policyImportCmd() *cobra.Command {
	var f importFlags
	cmd := &cobra.Command{
		Use:   "import --envoy FILE",
		Short: "Import the Envoy rate limit service's YAML configuration as policies",
		Long: `Import a configuration file of Envoy's reference rate limit service
(github.com/envoyproxy/ratelimit: domain, nested descriptors, rate_limit,
unlimited, replaces, shadow_mode, name) as quorate policies, so that Envoy's
ShouldRateLimit calls to any node are decided by them (docs/envoy.md).

The file's domains replace what an earlier import made of them: policies of
those domains the file no longer has are deleted. Other policies are left
alone. --dry-run prints the policies as YAML and contacts no node.

Exit status: 0 imported (and live everywhere with --wait), 1 refused, 2 bad
flags or file.`,
		Example: `  quorate policy import --envoy examples/envoy/ratelimit-config.yaml
  quorate policy import --envoy config.yaml --dry-run
  quorate policy import --envoy config.yaml --algorithm SLIDING_WINDOW`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.policyImport(cmd.Context(), &f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.envoy, "envoy", "", "the reference rate limit service's configuration file (required)")
	fl.StringVar(&f.algorithm, "algorithm", "FIXED_WINDOW", "the algorithm of every imported limit: FIXED_WINDOW decides as the reference does; "+
		"TOKEN_BUCKET, GCRA, SLIDING_WINDOW, SLIDING_LOG, LEAKY_BUCKET_POLICING on request")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the policies as YAML, apply nothing")
	fl.BoolVar(&f.wait, "wait", true, "wait until every node decides with the new version")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", 10*time.Second, "how long --wait waits")
	f.register(fl)
	_ = cmd.MarkFlagRequired("envoy")
	return cmd
}

// envoyDocument reads and converts an Envoy configuration file: the
// policies as a YAML document, their ids and the domains they cover.
func envoyDocument(file, algorithm string) (string, map[string]bool, map[string]bool, error) {
	fh, err := os.Open(file)
	if err != nil {
		return "", nil, nil, fmt.Errorf("--envoy: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, envoyconf.MaxFile+1))
	if err != nil {
		return "", nil, nil, fmt.Errorf("--envoy %s: %w", file, err)
	}
	cfg, err := envoyconf.Parse(file, data)
	if err != nil {
		return "", nil, nil, err
	}
	ps, err := envoyconf.Policies(cfg, envoyconf.Options{Algorithm: algorithm})
	if err != nil {
		return "", nil, nil, err
	}
	ids, domains := map[string]bool{}, map[string]bool{}
	for _, p := range ps {
		ids[p.ID] = true
	}
	for _, d := range cfg.Domains {
		domains[d.Name] = true
	}
	out, err := yaml.Marshal(struct {
		Policies []policy.Policy `yaml:"policies"`
	}{ps})
	if err != nil {
		return "", nil, nil, err
	}
	if len(out) > maxDocument {
		return "", nil, nil, fmt.Errorf("--envoy %s: the policies take %d bytes, more than a node takes in one message (%d): split the file", file, len(out), maxDocument)
	}
	return string(out), ids, domains, nil
}

func (a *app) policyImport(ctx context.Context, f *importFlags) error {
	if f.wait && f.waitTimeout <= 0 {
		return usageError(fmt.Errorf("--wait-timeout %v: must be positive", f.waitTimeout))
	}
	doc, ids, domains, err := envoyDocument(f.envoy, f.algorithm)
	if err != nil {
		return usageError(err)
	}
	if f.dryRun {
		_, err := io.WriteString(a.stdout, doc)
		return err
	}
	var resp, del *pb.ApplyPoliciesResponse
	err = f.call(ctx, func(ctx context.Context, ac pb.AdminClient) error {
		var err error
		if resp, err = ac.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: doc, SourceName: f.envoy}); err != nil {
			return err
		}
		// What an earlier import made of these domains and the file no
		// longer has: deleted after the apply, so a node never lacks a
		// limit the file still has.
		list, err := ac.ListPolicies(ctx, &pb.ListPoliciesRequest{})
		if err != nil {
			return err
		}
		stale := staleImports(list.GetPolicies(), ids, domains)
		if len(stale) == 0 {
			return nil
		}
		del, err = ac.DeletePolicies(ctx, &pb.DeletePoliciesRequest{PolicyIds: stale})
		return err
	})
	if err != nil {
		return err
	}
	applied := time.Now()
	cliview.Changes(a.stdout, resp)
	version := resp.GetVersion()
	if del != nil {
		cliview.Changes(a.stdout, del)
		version = del.GetVersion()
	}
	if !f.wait {
		return nil
	}
	return a.waitLive(ctx, &f.applyFlags, version, applied)
}

// staleImports are the imported policies (canonical JSON) of domains that
// ids does not name.
func staleImports(docs []string, ids, domains map[string]bool) []string {
	var out []string
	for _, js := range docs {
		var p policy.Policy
		if json.Unmarshal([]byte(js), &p) != nil {
			continue
		}
		if s, ok := envoyconf.SpecOf(&p); ok && domains[s.Domain] && !ids[p.ID] {
			out = append(out, p.ID)
		}
	}
	return out
}
