package cliview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The policy set: a change's diff, a policy as JSON or YAML, the list of
// policies and blocks, and what explain found.

// An AnswerError is what a node sent that a view could not show (a policy
// that is not JSON); a view's other errors are its writer's.
type AnswerError struct{ Err error }

func (e *AnswerError) Error() string { return e.Err.Error() }

func (e *AnswerError) Unwrap() error { return e.Err }

// Changes writes a change to the policy set: its diff, the node's
// warnings, then the version it made or that it was a dry run.
func Changes(w io.Writer, resp *pb.ApplyPoliciesResponse) {
	if d := strings.TrimRight(resp.GetDiff(), "\n"); d != "" {
		fmt.Fprintln(w, d)
	} else {
		fmt.Fprintln(w, "no changes")
	}
	Warnings(w, resp)
	if resp.GetApplied() {
		fmt.Fprintf(w, "applied version %d\n", resp.GetVersion())
	} else {
		fmt.Fprintln(w, "dry run: nothing applied")
	}
}

// Warnings writes the node's warnings about an applied document, one a line.
func Warnings(w io.Writer, resp *pb.ApplyPoliciesResponse) {
	for _, warn := range resp.GetWarnings() {
		fmt.Fprintln(w, "warning: "+warn)
	}
}

// A NodeWait is how one node caught up with a new policy version.
type NodeWait struct {
	ID       string
	Live     bool          // it decides with the version
	Took     time.Duration // since the apply was answered
	Answered bool          // it reported a version, the last in Version
	Version  uint64
	Err      error // its last failure, if it failed since
}

// Waits writes which nodes decide with a new policy version and how long
// each took ("live on n1 after 8ms, n2 after 9ms"), and returns the others,
// each with why: "n3 (at version 6)".
func Waits(w io.Writer, waits []NodeWait) (lagging []string) {
	var live []string
	for _, nw := range waits {
		switch {
		case nw.Live:
			live = append(live, fmt.Sprintf("%s after %s", nw.ID, Duration(nw.Took)))
		case nw.Err != nil:
			lagging = append(lagging, fmt.Sprintf("%s (%v)", nw.ID, nw.Err))
		case nw.Answered:
			lagging = append(lagging, fmt.Sprintf("%s (at version %d)", nw.ID, nw.Version))
		default:
			lagging = append(lagging, nw.ID+" (no answer)")
		}
	}
	if len(live) > 0 {
		fmt.Fprintf(w, "live on %s\n", strings.Join(live, ", "))
	}
	return lagging
}

// PolicyJSON writes a policy, as the node's canonical JSON, indented.
func PolicyJSON(w io.Writer, js string) error {
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(js), "", "  "); err != nil {
		return &AnswerError{fmt.Errorf("the node sent a policy that is not JSON: %w", err)}
	}
	fmt.Fprintln(w, b.String())
	return nil
}

// PolicyYAML writes a policy, given as the node's canonical JSON, as
// block-style YAML in the same field order (JSON is YAML, so the YAML
// parser reads it as it is).
func PolicyYAML(w io.Writer, js string) error {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(js), &n); err != nil {
		return &AnswerError{fmt.Errorf("the node sent a policy that is not JSON: %w", err)}
	}
	blockStyle(&n)
	b, err := yaml.Marshal(&n)
	if err != nil {
		return &AnswerError{err}
	}
	_, err = w.Write(b)
	return err
}

// blockStyle drops the flow style JSON has, down the tree.
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

// PoliciesJSON writes the policies and blocks as the HTTP API lists them.
func PoliciesJSON(w io.Writer, resp *pb.ListPoliciesResponse) error {
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
		return &AnswerError{fmt.Errorf("the node sent a policy that is not JSON: %w", err)}
	}
	fmt.Fprintln(w, string(b))
	return nil
}

// Policies writes the policy set's version and size, then a table of the
// policies (a row each) and one of the emergency blocks.
func Policies(w io.Writer, resp *pb.ListPoliciesResponse) error {
	fmt.Fprintf(w, "version %d: %d policies, %d blocks\n", resp.GetVersion(), len(resp.GetPolicies()), len(resp.GetBlocks()))
	if err := policyTable(w, resp.GetPolicies()); err != nil {
		return err
	}
	return blockTable(w, resp.GetBlocks())
}

// policyTable is the table of the policies, if there are any: the layer
// and kind the nodes infer where a policy names none.
func policyTable(w io.Writer, docs []string) error {
	if len(docs) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nID\tLAYER\tKIND\tMODE\tSCOPE\tLIMIT")
	inferred := layersAndKinds(docs)
	for _, js := range docs {
		var p map[string]any
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			return &AnswerError{fmt.Errorf("the node sent a policy that is not JSON: %w", err)}
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
	return nil
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

// blockTable is the table of the emergency blocks, if there are any.
func blockTable(w io.Writer, blocks []string) error {
	if len(blocks) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nBLOCK\tSCOPE\tEXPIRES\tREASON")
	for _, js := range blocks {
		var b map[string]any
		if err := json.Unmarshal([]byte(js), &b); err != nil {
			return &AnswerError{fmt.Errorf("the node sent a block that is not JSON: %w", err)}
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

// joinEach is each limit of a list (named by nameKey) with its algorithm
// and config, joined by sep.
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

// configSummary is a config's fields as k=v, in key order.
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

// sortedKeys is m's keys in order.
func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Explain writes what explain found for a request's descriptors: the policy
// version, where the tier came from when the tenant assignment gave it,
// the emergency block that denies them if one does, each policy
// that matches, whether it was selected and why, then the dry run's
// decision (as DescriptorCheck writes it).
func Explain(w io.Writer, resp *pb.ExplainResponse) {
	fmt.Fprintf(w, "policy version %d\n", resp.GetVersion())
	if t := resp.GetTier(); t != "" {
		fmt.Fprintln(w, t)
	}
	if id := resp.GetBlockId(); id != "" {
		fmt.Fprintf(w, "emergency block %s denies these descriptors\n", id)
	}
	if len(resp.GetMatches()) == 0 {
		fmt.Fprintln(w, "no policy matches")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nPOLICY\tSELECTED\tLAYER\tKIND\tWHY")
		for _, m := range resp.GetMatches() {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.GetPolicyId(), yesNo(m.GetSelected()),
				withFrom(m.GetLayer(), m.GetLayerFrom()), withFrom(m.GetKind(), m.GetKindFrom()), m.GetWhy())
		}
		tw.Flush()
	}
	if d := resp.GetDecision(); d != nil {
		fmt.Fprintln(w, "\ndry run:")
		DescriptorCheck(w, d)
	}
}

// withFrom is a layer or kind with where it comes from: "TENANT (inferred
// from key tenant_id)"; "-" from a node too old to say.
func withFrom(v, from string) string {
	switch {
	case v == "":
		return "-"
	case from == "":
		return v
	}
	return v + " (" + from + ")"
}

// yesNo is b as "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
