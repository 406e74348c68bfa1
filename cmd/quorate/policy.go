package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/policy"
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
		return failure(rpcError(err, f.addr, f.timeout))
	}
	return nil
}

func (a *app) policyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Apply, show, delete and explain the cluster's policies",
		Long: `Policies are the cluster's limits, as data: a check that carries descriptors
(who the request is, what it touches) is decided by every policy whose scope
matches. These commands change and show the policy set through any node.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(a.policyApplyCmd(), a.policyImportCmd(), a.policyGetCmd(), a.policyListCmd(), a.policyDeleteCmd(), a.policyExplainCmd())
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
	doc, err := readDocument(f.file)
	if err != nil {
		return usageError(err)
	}
	var resp *pb.ApplyPoliciesResponse
	err = f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
		resp, err = ac.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: doc, SourceName: f.file, Prune: f.prune, DryRun: f.dryRun})
		return err
	})
	if err != nil {
		return err
	}
	applied := time.Now()
	printChanges(a.stdout, resp)
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

// printChanges writes a change to the policy set: its diff, then the
// version it made or that it was a dry run.
func printChanges(w io.Writer, resp *pb.ApplyPoliciesResponse) {
	if d := strings.TrimRight(resp.GetDiff(), "\n"); d != "" {
		fmt.Fprintln(w, d)
	} else {
		fmt.Fprintln(w, "no changes")
	}
	if resp.GetApplied() {
		fmt.Fprintf(w, "applied version %d\n", resp.GetVersion())
	} else {
		fmt.Fprintln(w, "dry run: nothing applied")
	}
}

// pollInterval is how often --wait asks each node for its version: fine
// enough to time propagation in milliseconds, cheap for a few seconds.
const pollInterval = 5 * time.Millisecond

// nodeWait is how one node caught up with a version.
type nodeWait struct {
	id       string
	live     bool
	took     time.Duration // since the apply was answered
	answered bool          // it reported a version, the last in version
	version  uint64
	err      error // its last failure, if it failed since
}

// waitLive waits until every node --addr knows of decides with version,
// and says how long each took after since.
func (a *app) waitLive(ctx context.Context, f *applyFlags, version uint64, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, f.waitTimeout)
	defer cancel()
	var st *pb.StatusResponse
	err := f.call(ctx, func(ctx context.Context, ac pb.AdminClient) (err error) {
		st, err = ac.Status(ctx, &pb.StatusRequest{})
		return err
	})
	if err != nil {
		return err
	}
	opts, _ := f.creds.dialOptions() // call checked them
	waits := waitNodes(ctx, st.GetNodes(), version, since, opts)
	return reportWaits(a.stdout, waits, version, f.waitTimeout)
}

// waitNodes polls every node that may be up, in parallel.
func waitNodes(ctx context.Context, nodes []*pb.NodeStatus, version uint64, since time.Time, opts []grpc.DialOption) []nodeWait {
	var live []*pb.NodeStatus
	for _, n := range nodes {
		if s := n.GetState(); n.GetRpcAddr() != "" && s != pb.NodeState_NODE_STATE_DEAD && s != pb.NodeState_NODE_STATE_LEFT {
			live = append(live, n)
		}
	}
	waits := make([]nodeWait, len(live))
	var wg sync.WaitGroup
	for i, n := range live {
		wg.Go(func() { waits[i] = waitNode(ctx, n, version, since, opts) })
	}
	wg.Wait()
	return waits
}

func waitNode(ctx context.Context, n *pb.NodeStatus, version uint64, since time.Time, opts []grpc.DialOption) nodeWait {
	w := nodeWait{id: n.GetId()}
	c, err := client.Dial(n.GetRpcAddr(), opts...)
	if err != nil {
		w.err = err
		return w
	}
	defer c.Close()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		st, err := c.Status(ctx)
		switch {
		case err == nil && st.GetPolicyVersion() >= version:
			w.live, w.took = true, time.Since(since)
			return w
		case err == nil:
			w.answered, w.version, w.err = true, st.GetPolicyVersion(), nil
		case status.Code(err) != codes.DeadlineExceeded && ctx.Err() == nil:
			// The wait's own deadline is no news about the node (the
			// server's timer can fire before ours).
			w.err = err
		}
		select {
		case <-ctx.Done():
			return w
		case <-tick.C:
		}
	}
}

// reportWaits prints "live on n1 after 8ms, ..." and fails naming the
// nodes that lag.
func reportWaits(w io.Writer, waits []nodeWait, version uint64, timeout time.Duration) error {
	var live, lag []string
	for _, nw := range waits {
		switch {
		case nw.live:
			live = append(live, fmt.Sprintf("%s after %s", nw.id, cliview.Duration(nw.took)))
		case nw.err != nil:
			lag = append(lag, fmt.Sprintf("%s (%v)", nw.id, nw.err))
		case nw.answered:
			lag = append(lag, fmt.Sprintf("%s (at version %d)", nw.id, nw.version))
		default:
			lag = append(lag, nw.id+" (no answer)")
		}
	}
	if len(live) > 0 {
		fmt.Fprintf(w, "live on %s\n", strings.Join(live, ", "))
	}
	if len(lag) > 0 {
		return failure(fmt.Errorf("--wait-timeout %v: version %d not live on %s", timeout, version, strings.Join(lag, ", ")))
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
			return printDocument(a.stdout, resp.GetJson(), o.output)
		},
	}
	o.register(cmd.Flags(), "json", "json", "yaml")
	f.register(cmd.Flags())
	return cmd
}

// printDocument writes a node's canonical JSON indented, or as YAML.
func printDocument(w io.Writer, js, output string) error {
	if output == "yaml" {
		return printYAML(w, js)
	}
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(js), "", "  "); err != nil {
		return failure(fmt.Errorf("the node sent a policy that is not JSON: %w", err))
	}
	fmt.Fprintln(w, b.String())
	return nil
}

// printYAML re-encodes JSON as block-style YAML, keeping the field order
// (JSON is YAML, so the YAML parser reads it as it is).
func printYAML(w io.Writer, js string) error {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(js), &n); err != nil {
		return failure(fmt.Errorf("the node sent a policy that is not JSON: %w", err))
	}
	blockStyle(&n)
	b, err := yaml.Marshal(&n)
	if err != nil {
		return failure(err)
	}
	_, err = w.Write(b)
	return err
}

func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode {
		n.Style &^= yaml.DoubleQuotedStyle // quoted only where YAML needs it
	} else {
		n.Style &^= yaml.FlowStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
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
				return printListJSON(a.stdout, resp)
			}
			return printPolicies(a.stdout, resp)
		},
	}
	o.register(cmd.Flags(), "table", "table", "json")
	f.register(cmd.Flags())
	return cmd
}

// printListJSON writes the list as the HTTP API answers it.
func printListJSON(w io.Writer, resp *pb.ListPoliciesResponse) error {
	raw := func(ss []string) []json.RawMessage {
		out := make([]json.RawMessage, len(ss))
		for i, s := range ss {
			out[i] = json.RawMessage(s)
		}
		return out
	}
	b, err := json.MarshalIndent(map[string]any{"version": resp.GetVersion(), "policies": raw(resp.GetPolicies()),
		"blocks": raw(resp.GetBlocks())}, "", "  ")
	if err != nil {
		return failure(fmt.Errorf("the node sent a policy that is not JSON: %w", err))
	}
	fmt.Fprintln(w, string(b))
	return nil
}

// printPolicies writes one line per policy, then one per block.
func printPolicies(w io.Writer, resp *pb.ListPoliciesResponse) error {
	fmt.Fprintf(w, "version %d: %d policies, %d blocks\n", resp.GetVersion(), len(resp.GetPolicies()), len(resp.GetBlocks()))
	if len(resp.GetPolicies()) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nID\tLAYER\tKIND\tMODE\tSCOPE\tLIMIT")
		inferred := layersAndKinds(resp.GetPolicies())
		for _, js := range resp.GetPolicies() {
			var p map[string]any
			if err := json.Unmarshal([]byte(js), &p); err != nil {
				return failure(fmt.Errorf("the node sent a policy that is not JSON: %w", err))
			}
			id := field(p, "policy_id")
			layer, kind := field(p, "layer"), field(p, "kind")
			if lk, ok := inferred[id]; ok {
				layer, kind = lk[0], lk[1]
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", id, layer, kind,
				policyMode(p), scopeSummary(p["scope"]), limitSummary(p))
		}
		tw.Flush()
	}
	return printBlocks(w, resp.GetBlocks())
}

// layersAndKinds compiles the listed set as the nodes do, for the layer and
// kind of every policy, inferred where it says none. Empty if the set does
// not compile here (an older or newer CLI than the nodes).
func layersAndKinds(docs []string) map[string][2]string {
	ps := make([]policy.Policy, 0, len(docs))
	for _, js := range docs {
		var p policy.Policy
		if json.Unmarshal([]byte(js), &p) != nil {
			return nil
		}
		ps = append(ps, p)
	}
	s, err := policy.Compile(ps, nil, 0)
	if err != nil {
		return nil
	}
	out := make(map[string][2]string, len(ps))
	for _, p := range ps {
		if l, k, ok := s.LayerKind(p.ID); ok {
			out[p.ID] = [2]string{l.String(), k.String()}
		}
	}
	return out
}

func printBlocks(w io.Writer, blocks []string) error {
	if len(blocks) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nBLOCK\tSCOPE\tEXPIRES\tREASON")
	for _, js := range blocks {
		var b map[string]any
		if err := json.Unmarshal([]byte(js), &b); err != nil {
			return failure(fmt.Errorf("the node sent a block that is not JSON: %w", err))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", field(b, "block_id"), scopeSummary(b["scope"]), field(b, "expires_at"), field(b, "reason"))
	}
	return tw.Flush()
}

// field is m[k] as text, "-" if absent.
func field(m map[string]any, k string) string {
	v, ok := m[k]
	if !ok || v == nil || v == "" {
		return "-"
	}
	return text(v)
}

// policyMode is the mode, with "(disabled)" for a policy that is off.
func policyMode(p map[string]any) string {
	m := field(p, "mode")
	if m == "-" {
		m = "HARD"
	}
	if p["enabled"] == false {
		m += " (disabled)"
	}
	return m
}

// scopeSummary is "k=v k2=a|b" in key order, "*" for every request.
func scopeSummary(v any) string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return "*"
	}
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		v := text(m[k])
		if m[k] == nil || m[k] == "" {
			v = "(absent)" // how a fallback says "no api_key_id"
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

// limitSummary is a policy's limits in one cell: its algorithm and config,
// its named limits, or its quota tree's levels.
func limitSummary(p map[string]any) string {
	if tree, ok := p["quota_tree"].([]any); ok && len(tree) > 0 {
		return joinEach(tree, " > ", "level")
	}
	if limits, ok := p["limits"].([]any); ok && len(limits) > 0 {
		return joinEach(limits, "; ", "name")
	}
	if p["algorithm"] == nil && p["config"] == nil {
		return "-"
	}
	return strings.TrimSpace(field(p, "algorithm") + " " + configSummary(p["config"]))
}

func joinEach(list []any, sep, nameKey string) string {
	parts := make([]string, 0, len(list))
	for _, e := range list {
		m, _ := e.(map[string]any)
		s := configSummary(m["config"])
		if alg, ok := m["algorithm"]; ok {
			s = text(alg) + " " + s
		}
		parts = append(parts, strings.TrimSpace(field(m, nameKey)+" "+s))
	}
	return strings.Join(parts, sep)
}

func configSummary(v any) string {
	m, _ := v.(map[string]any)
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, k+"="+text(m[k]))
	}
	return strings.Join(parts, " ")
}

// text renders a JSON value briefly: lists as a|b, numbers without
// exponents.
func text(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = text(e)
		}
		return strings.Join(parts, "|")
	case float64:
		return fmt.Sprintf("%.10g", v)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
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
			printChanges(a.stdout, resp)
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
			printExplain(a.stdout, resp)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&desc, "descriptor", nil, "NAME=VALUE, repeated (names: "+strings.Join(descriptorNames(), ", ")+", custom.<name>)")
	f.register(cmd.Flags())
	return cmd
}

func printExplain(w io.Writer, resp *pb.ExplainResponse) {
	fmt.Fprintf(w, "policy version %d\n", resp.GetVersion())
	if id := resp.GetBlockId(); id != "" {
		fmt.Fprintf(w, "emergency block %s denies these descriptors\n", id)
	}
	if len(resp.GetMatches()) == 0 {
		fmt.Fprintln(w, "no policy matches")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nPOLICY\tSELECTED\tWHY")
		for _, m := range resp.GetMatches() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", m.GetPolicyId(), yesNo(m.GetSelected()), m.GetWhy())
		}
		tw.Flush()
	}
	if d := resp.GetDecision(); d != nil {
		fmt.Fprintln(w, "\ndry run:")
		cliview.DescriptorCheck(w, d)
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
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
