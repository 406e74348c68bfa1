package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/internal/cliview"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// maxDocument is the largest policy file sent: a node's default
// --max-recv-msg-size, less room for the rest of the message.
const maxDocument = 4<<20 - 4<<10

// adminFlags are what the policy and block commands share: the node to ask
// and how.
type adminFlags struct {
	addr    string
	timeout time.Duration
	creds   credFlags
}

func (f *adminFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.addr, "addr", "127.0.0.1:7401", "gRPC address of any node")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Second, "deadline of each call")
	f.creds.register(fl)
}

// call runs fn against the Admin service at --addr within --timeout.
func (f *adminFlags) call(ctx context.Context, fn func(context.Context, pb.AdminClient) error) error {
	if f.timeout <= 0 {
		return usageError(fmt.Errorf("--timeout %v: must be positive", f.timeout))
	}
	c, err := f.creds.dial(f.addr)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := fn(ctx, pb.NewAdminClient(c.Conn())); err != nil {
		return failure(cliview.RPCError(err, f.addr, f.timeout))
	}
	return nil
}

func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Apply, show, delete, explain and roll back the cluster's policies",
		Long: `Policies are the cluster's limits, as data: a check that carries descriptors
(who the request is, what it touches) is decided by every policy whose scope
matches. These commands change and show the policy set through any node.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.policyApplyCmd(), a.policyImportCmd(), a.policyGetCmd(), a.policyListCmd(), a.policyDeleteCmd(), a.policyExplainCmd(),
		a.policyHistoryCmd(), a.policyDiffCmd(), a.policyRollbackCmd())
	return cmd
}

type applyFlags struct {
	adminFlags
	file        string
	prune       bool
	dryRun      bool
	wait        bool
	waitTimeout time.Duration
}

func (a *app) policyApplyCmd() *cobra.Command {
	var f applyFlags
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Apply a YAML or JSON file of policies as the desired set",
		Long: `Apply a YAML or JSON file of policies: policies it names are added or
replaced, and with --prune those it does not name are removed. The whole set
is validated first; an invalid file changes nothing. Prints the diff, then
waits until every node decides with the new version (--wait=false to skip).

A file larger than one message (4 MB) is parsed here and applied in parts
of at most 3 MB, parents before the policies that extend them; each part
is a version of its own, a refused part stops the apply with the parts
before it applied, and --prune needs a file that fits one message.

Exit status: 0 applied (and live everywhere with --wait), 1 refused or not
live in time, 2 bad flags.`,
		Example: `  quorate policy apply -f examples/policies.yaml
  quorate policy apply -f policies.yaml --prune --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.policyApply(cmd.Context(), &f) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "the policies, YAML or JSON (required)")
	fl.BoolVar(&f.prune, "prune", false, "remove the policies the file does not name")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the diff only")
	fl.BoolVar(&f.wait, "wait", true, "wait until every node decides with the new version, and say how long each took")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", 10*time.Second, "how long --wait waits")
	f.register(fl)
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func (a *app) policyApply(ctx context.Context, f *applyFlags) error {
	if f.wait && f.waitTimeout <= 0 {
		return usageError(fmt.Errorf("--wait-timeout %v: must be positive", f.waitTimeout))
	}
	if fi, err := os.Stat(f.file); err == nil && fi.Size() > maxDocument {
		return a.policyApplyLarge(ctx, f, fi.Size())
	}
	doc, err := readDocument(f.file)
	if err != nil {
		return usageError(err)
	}
	var resp *pb.ApplyPoliciesResponse
	err = f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
		resp, err = ac.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: doc, SourceName: f.file, Prune: f.prune, DryRun: f.dryRun}, applyAnswerBytes)
		return err
	})
	if err != nil {
		return err
	}
	applied := time.Now()
	cliview.Changes(a.stdout, resp)
	if !resp.GetApplied() || !f.wait {
		return nil
	}
	return a.waitLive(ctx, f, resp.GetVersion(), applied)
}

// readDocument reads the file of -f, refusing one no node would take.
func readDocument(file string) (string, error) {
	fh, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("-f: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxDocument+1))
	if err != nil {
		return "", fmt.Errorf("-f %s: %w", file, err)
	}
	if len(b) > maxDocument {
		return "", fmt.Errorf("-f %s: larger than %d bytes, more than a node takes in one message: split it", file, maxDocument)
	}
	return string(b), nil
}

// waitLive waits until every node --addr knows of decides with version,
// and says how long each took after since.
func (a *app) waitLive(ctx context.Context, f *applyFlags, version uint64, since time.Time) error {
	lag, err := a.waitVersion(ctx, &f.adminFlags, f.waitTimeout, policyVersion, version, since)
	if err != nil {
		return err
	}
	if len(lag) > 0 {
		return failure(fmt.Errorf("--wait-timeout %v: version %d not live on %s", f.waitTimeout, version, strings.Join(lag, ", ")))
	}
	return nil
}

type outputFlag struct {
	output string
}

func (o *outputFlag) register(fl *pflag.FlagSet, def string, values ...string) {
	fl.StringVarP(&o.output, "output", "o", def, strings.Join(values, " or "))
}

func (o *outputFlag) check(values ...string) error {
	for _, v := range values {
		if o.output == v {
			return nil
		}
	}
	return usageError(fmt.Errorf("-o %q: want %s", o.output, strings.Join(values, " or ")))
}

func (a *app) policyGetCmd() *cobra.Command {
	var (
		f adminFlags
		o outputFlag
	)
	cmd := &cobra.Command{
		Use:   "get ID",
		Short: "Print one policy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check("json", "yaml"); err != nil {
				return err
			}
			var resp *pb.GetPolicyResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.GetPolicy(ctx, &pb.GetPolicyRequest{PolicyId: args[0]})
				return err
			})
			if err != nil {
				return err
			}
			if o.output == "yaml" {
				return viewError(cliview.PolicyYAML(a.stdout, resp.GetJson()))
			}
			return viewError(cliview.PolicyJSON(a.stdout, resp.GetJson()))
		},
	}
	o.register(cmd.Flags(), "json", "json", "yaml")
	f.register(cmd.Flags())
	return cmd
}
func (a *app) policyListCmd() *cobra.Command {
	var (
		f adminFlags
		o outputFlag
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the policies and emergency blocks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.check("table", "json"); err != nil {
				return err
			}
			var resp *pb.ListPoliciesResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.ListPolicies(ctx, &pb.ListPoliciesRequest{})
				return err
			})
			if err != nil {
				return err
			}
			if o.output == "json" {
				return viewError(cliview.PoliciesJSON(a.stdout, resp))
			}
			return viewError(cliview.Policies(a.stdout, resp))
		},
	}
	o.register(cmd.Flags(), "table", "table", "json")
	f.register(cmd.Flags())
	return cmd
}
func (a *app) policyDeleteCmd() *cobra.Command {
	var (
		f      adminFlags
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "delete ID...",
		Short: "Delete policies",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *pb.ApplyPoliciesResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.DeletePolicies(ctx, &pb.DeletePoliciesRequest{PolicyIds: args, DryRun: dryRun})
				return err
			})
			if err != nil {
				return err
			}
			cliview.Changes(a.stdout, resp)
			return nil
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the diff only")
	f.register(cmd.Flags())
	return cmd
}

func (a *app) policyExplainCmd() *cobra.Command {
	var (
		f    adminFlags
		desc []string
	)
	cmd := &cobra.Command{
		Use:   "explain --descriptor NAME=VALUE...",
		Short: "Show which policies match a request, which decide and why",
		Long: `Show every policy whose scope matches the descriptors, whether it was
selected and why, and what a check with them would decide (a dry run:
nothing is consumed).

Descriptor names: ` + strings.Join(descriptorNames(), ", ") + `, and custom.<name>.`,
		Example: `  quorate policy explain --descriptor tenant_id=t_44 --descriptor tenant_tier=PRO --descriptor route=/v1/payments`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDescriptors(desc)
			if err != nil {
				return usageError(err)
			}
			var resp *pb.ExplainResponse
			err = f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.Explain(ctx, &pb.ExplainRequest{Descriptors: d})
				return err
			})
			if err != nil {
				return err
			}
			cliview.Explain(a.stdout, resp)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&desc, "descriptor", nil, "NAME=VALUE, repeated (names: "+strings.Join(descriptorNames(), ", ")+", custom.<name>)")
	f.register(cmd.Flags())
	return cmd
}

// itemFlags are the flags of "quorate check" that describe an inline item.
var itemFlags = []string{"name", "key", "algorithm", "limit", "period", "burst", "cost", "fail", "idempotency-key"}

// descriptorRequest is the CheckRequest of "quorate check --descriptor".
func (f *checkFlags) descriptorRequest() (*pb.CheckRequest, error) {
	var both []string
	for _, n := range itemFlags {
		if f.flags.Changed(n) {
			both = append(both, "--"+n)
		}
	}
	if len(both) > 0 {
		return nil, fmt.Errorf("--descriptor cannot be combined with %s: a check carries descriptors (the policies decide) or one item", strings.Join(both, ", "))
	}
	d, err := parseDescriptors(f.descriptors)
	if err != nil {
		return nil, err
	}
	mode, err := client.ParseMode(f.mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	if f.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %v: must be positive", f.timeout)
	}
	if _, err := f.routing(); err != nil {
		return nil, err
	}
	return &pb.CheckRequest{RequestId: f.requestID, Mode: mode, Descriptors: d}, nil
}

// requireItemFlags is cobra's required-flag check for an item check, which
// a descriptor check does not need.
func (f *checkFlags) requireItemFlags() error {
	var missing []string
	for _, n := range []string{"name", "key", "limit", "period"} {
		if !f.flags.Changed(n) {
			missing = append(missing, strconv.Quote(n))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("required flag(s) %s not set (or check by --descriptor)", strings.Join(missing, ", "))
	}
	return nil
}
