package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// historyNode is the part of a Node the history calls use: a meta state
// machine, and ChangePolicies recording what it was asked.
type historyNode struct {
	Node
	f       meta.FSM
	changed *meta.Command
	dry     bool
}

func (n *historyNode) PolicyHistory() (meta.PolicyState, meta.History) { return n.f.History() }

// Policies is the set an apply is reviewed against: none here.
func (n *historyNode) Policies() (*policy.Snapshot, bool) { return nil, true }

func (n *historyNode) ChangePolicies(_ context.Context, c *meta.Command, dryRun bool) (meta.Result, error) {
	n.changed, n.dry = c, dryRun
	return meta.Result{Version: 7}, nil
}

// newHistoryNode applies versions changes of policy x's limit (1/24h,
// 2/24h, ...) by operator at one-second steps from 2026-12-02.
func newHistoryNode(t *testing.T, versions int) *historyNode {
	n := &historyNode{}
	for i := 1; i <= versions; i++ {
		ps, err := policy.Parse("h.yaml", fmt.Appendf(nil, "policy_id: x\nkey: [tenant_id]\nalgorithm: FIXED_WINDOW\nconfig: { limit: %d/24h }\n", i))
		if err != nil {
			t.Fatal(err)
		}
		c := meta.Command{Op: meta.OpApply, Who: "operator", Source: "h.yaml", Policies: ps,
			Now: time.Date(2026, 12, 2, 0, 0, i, 0, time.UTC).UnixNano()}
		b, _ := json.Marshal(c)
		if res := n.f.Apply(b).(meta.Result); res.Err != "" {
			t.Fatal(res.Err)
		}
	}
	return n
}

func historyAdmin(n Node) *admin {
	return &admin{f: NewFrontend(n, Config{Audit: slog.New(slog.DiscardHandler)})}
}

// field is the field an InvalidArgument names, and its message.
func field(err error) (string, string) {
	st := status.Convert(err)
	if v := violation(st); st.Code() == codes.InvalidArgument && v != nil {
		return v.GetField(), st.Message()
	}
	return "", st.Message()
}

func TestPolicyHistoryRPC(t *testing.T) {
	n := newHistoryNode(t, 3)
	resp, err := historyAdmin(n).PolicyHistory(context.Background(), &pb.PolicyHistoryRequest{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	vs := resp.GetVersions()
	if resp.GetVersion() != 3 || len(vs) != 2 || resp.GetMaxVersions() != 100 || resp.GetMaxChanges() != 500_000 {
		t.Fatalf("history: %v; want version 3, the newest two, the bounds", resp)
	}
	v := vs[0]
	if v.GetVersion() != 3 || v.GetWho() != "operator" || v.GetOp() != "apply" || v.GetSource() != "h.yaml" ||
		!v.GetTime().AsTime().Equal(time.Date(2026, 12, 2, 0, 0, 3, 0, time.UTC)) || v.GetChanged().GetCount() != 1 || v.GetChanged().GetIds()[0] != "x" {
		t.Errorf("newest version: %v", v)
	}
	if vs[1].GetVersion() != 2 {
		t.Errorf("second: %v; want version 2", vs[1])
	}
}

// TestPolicyHistoryBadInput: versions that cannot be rebuilt are
// InvalidArgument naming the field and why, before anything is proposed.
func TestPolicyHistoryBadInput(t *testing.T) {
	n := newHistoryNode(t, meta.MaxHistoryVersions+2) // versions 1 and 2 fell off
	a := historyAdmin(n)
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		call  func() error
		field string
		msg   string
	}{
		{"diff without from", func() error { _, err := a.PolicyDiff(ctx, &pb.PolicyDiffRequest{To: 5}); return err }, "from", "required"},
		{"diff from the future", func() error { _, err := a.PolicyDiff(ctx, &pb.PolicyDiffRequest{From: 200}); return err }, "from",
			"policy version 200 does not exist: the set is at version 102"},
		{"diff from a version that fell off", func() error { _, err := a.PolicyDiff(ctx, &pb.PolicyDiffRequest{From: 2, To: 50}); return err }, "from",
			"policy version 2 fell off the history, which keeps the last 100 versions and at most 500000 policy changes: the oldest kept is 3"},
		{"diff to the future", func() error { _, err := a.PolicyDiff(ctx, &pb.PolicyDiffRequest{From: 3, To: 103}); return err }, "to", "does not exist"},
		{"rollback without to", func() error { _, err := a.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{}); return err }, "to", "required"},
		{"rollback to a version that fell off", func() error {
			_, err := a.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{To: 1, DryRun: true})
			return err
		}, "to", "policy version 1 fell off the history"},
	} {
		f, msg := field(tt.call())
		if f != tt.field || !strings.Contains(msg, tt.msg) {
			t.Errorf("%s: field %q, %q; want %q, containing %q", tt.name, f, msg, tt.field, tt.msg)
		}
	}
	if n.changed != nil {
		t.Errorf("a refused rollback was proposed: %+v", n.changed)
	}
}

func TestPolicyDiffAndRollbackRPC(t *testing.T) {
	n := newHistoryNode(t, 3)
	a := historyAdmin(n)
	ctx := security.WithPrincipal(context.Background(), security.Principal{Name: "operator"})
	d, err := a.PolicyDiff(ctx, &pb.PolicyDiffRequest{From: 1})
	if err != nil || d.GetTo() != 3 || d.GetDiff() != "~ x: config.limit 1/24h -> 3/24h\n" || d.GetChanged().GetIds()[0] != "x" {
		t.Fatalf("diff 1 to the current: %v %v", d, err)
	}
	if _, err := a.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{To: 1, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if c := n.changed; c == nil || c.Op != meta.OpRollback || c.To != 1 || c.Who != "operator" || !n.dry {
		t.Errorf("the node was asked %+v (dry %v); want a dry rollback to 1 by operator", c, n.dry)
	}
}

// TestHistoryAccess: history and diff are reads, a rollback is an
// audited admin call.
func TestHistoryAccess(t *testing.T) {
	read := access{scopes: security.ScopeRead | security.ScopeAdmin}
	for m, want := range map[string]access{
		"/quorate.v1.Admin/PolicyHistory":    read,
		"/quorate.v1.Admin/PolicyDiff":       read,
		"/quorate.v1.Admin/RollbackPolicies": {scopes: security.ScopeAdmin, audit: true},
	} {
		if got := methodAccess(m); got != want {
			t.Errorf("%s: %+v; want %+v", m, got, want)
		}
	}
}

// TestApplyRecordsSource: an apply names its document for the history.
func TestApplyRecordsSource(t *testing.T) {
	n := &historyNode{}
	doc := "policies:\n  - policy_id: x\n    key: [tenant_id]\n    algorithm: FIXED_WINDOW\n    config: { limit: 5/24h }\n"
	if _, err := historyAdmin(n).ApplyPolicies(context.Background(), &pb.ApplyPoliciesRequest{Document: doc, SourceName: "policies/prod.yaml"}); err != nil {
		t.Fatal(err)
	}
	if n.changed == nil || n.changed.Source != "policies/prod.yaml" {
		t.Errorf("the node was asked %+v; want the source policies/prod.yaml", n.changed)
	}
}

// TestRollbackAudited: a rollback's audit line names its target.
func TestRollbackAudited(t *testing.T) {
	n := newHistoryNode(t, 2)
	var log strings.Builder
	a := &admin{f: NewFrontend(n, Config{Audit: slog.New(slog.NewTextHandler(&log, nil))})}
	ctx := security.WithPrincipal(context.Background(), security.Principal{Name: "oncall"})
	if _, err := a.RollbackPolicies(ctx, &pb.RollbackPoliciesRequest{To: 1}); err != nil {
		t.Fatal(err)
	}
	if got := log.String(); !strings.Contains(got, `msg="audit: policy change" who=oncall op=rollback version=7`) || !strings.Contains(got, " to=1") {
		t.Errorf("audit: %q; want the rollback to 1 by oncall", got)
	}
}
