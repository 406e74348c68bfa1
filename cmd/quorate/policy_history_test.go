package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

var history = &pb.PolicyHistoryResponse{Version: 9, FellOff: 3, Dropped: 3, MaxVersions: 100, MaxChanges: 500000, Versions: []*pb.PolicyVersion{
	{Version: 9, Time: timestamppb.New(time.Date(2026, 12, 2, 10, 4, 5, 0, time.UTC)), Who: "operator", Op: "rollback", RollbackTo: 5,
		Changed: &pb.PolicyIDs{Count: 1, Ids: []string{"plan_pro"}}},
	{Version: 8, Time: timestamppb.New(time.Date(2026, 12, 2, 10, 3, 0, 0, time.UTC)), Who: "ci", Op: "apply", Source: "policies.yaml",
		Added: &pb.PolicyIDs{Count: 3, Ids: []string{"a", "b", "c"}}, Changed: &pb.PolicyIDs{Count: 1, Ids: []string{"plan_pro"}},
		Removed: &pb.PolicyIDs{Count: 2, Ids: []string{"old", "older"}}, Extraction: true},
	{Version: 7, Time: timestamppb.New(time.Date(2026, 12, 2, 10, 2, 0, 0, time.UTC)), Who: "oncall", Op: "block", Blocks: []string{"block-1"}},
	{Version: 4, Op: "baseline"},
}}

func (f *fakeAdmin) PolicyHistory(_ context.Context, req *pb.PolicyHistoryRequest) (*pb.PolicyHistoryResponse, error) {
	return history, f.record(req)
}

func (f *fakeAdmin) PolicyDiff(_ context.Context, req *pb.PolicyDiffRequest) (*pb.PolicyDiffResponse, error) {
	return &pb.PolicyDiffResponse{From: req.GetFrom(), To: 9, Diff: "~ plan_pro: config.rate 3000/min -> 4000/min\n"}, f.record(req)
}

func (f *fakeAdmin) RollbackPolicies(_ context.Context, req *pb.RollbackPoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	return &pb.ApplyPoliciesResponse{Version: 10, Changed: []string{"plan_pro"}, Diff: "~ plan_pro: config.rate 4000/min -> 3000/min\n", Applied: !req.GetDryRun()}, f.record(req)
}

func TestPolicyHistory(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "policy", "history", "--plaintext", "--addr", addr)
	want := `VERSION  TIME (UTC)           WHO       OP                   CHANGES
9        2026-12-02 10:04:05  operator  rollback to 5        ~plan_pro
8        2026-12-02 10:03:00  ci        apply policies.yaml  +a +b +c ~plan_pro (2 more) ~extraction
7        2026-12-02 10:02:00  oncall    block                block block-1
4        -                    -         baseline             (the set when this node began keeping history)
versions up to 3 fell off (3 in all): the history keeps the last 100 versions and at most 500000 changed policies
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, stdout:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	if got := f.lastRequest(); !proto.Equal(got, &pb.PolicyHistoryRequest{Limit: 20}) {
		t.Errorf("server got %v; want the default limit 20", got)
	}
	r = runCLI(t, "policy", "history", "--plaintext", "--addr", addr, "--limit", "2", "--json")
	expectRun(t, r, 0, []string{`"version": 9,`, `"op": "rollback",`, `"rollback_to": 5,`, `"time": null,`, `"fell_off": 3,`}, nil)
	if got := f.lastRequest(); !proto.Equal(got, &pb.PolicyHistoryRequest{Limit: 2}) {
		t.Errorf("server got %v; want limit 2", got)
	}
	expectRun(t, runCLI(t, "policy", "history", "--plaintext", "--addr", addr, "--limit", "-1"), 2, nil, []string{`invalid argument "-1" for "--limit"`})
}

func TestPolicyDiff(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "policy", "diff", "5", "9", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"~ plan_pro: config.rate 3000/min -> 4000/min\n"}, nil)
	if got := f.lastRequest(); !proto.Equal(got, &pb.PolicyDiffRequest{From: 5, To: 9}) {
		t.Errorf("server got %v", got)
	}
	runCLI(t, "policy", "diff", "5", "--plaintext", "--addr", addr)
	if got := f.lastRequest(); !proto.Equal(got, &pb.PolicyDiffRequest{From: 5}) {
		t.Errorf("diff A alone: server got %v; want to the current version", got)
	}
	expectRun(t, runCLI(t, "policy", "diff", "v5", "--plaintext", "--addr", addr), 2, nil, []string{`A "v5": want a policy version`})
	expectRun(t, runCLI(t, "policy", "diff", "5", "0", "--plaintext", "--addr", addr), 2, nil, []string{`B "0": want a policy version`})
	expectRun(t, runCLI(t, "policy", "diff", "--plaintext", "--addr", addr), 2, nil, []string{"accepts between 1 and 2 arg(s)"})
}

func TestPolicyRollback(t *testing.T) {
	f := &fakeAdmin{}
	addr := startFakeNode(t, f)
	r := runCLI(t, "policy", "rollback", "--to", "5", "--dry-run", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"~ plan_pro: config.rate 4000/min -> 3000/min\ndry run: nothing applied\n"}, nil)
	if got := f.lastRequest(); !proto.Equal(got, &pb.RollbackPoliciesRequest{To: 5, DryRun: true}) {
		t.Errorf("server got %v", got)
	}
	r = runCLI(t, "policy", "rollback", "--to", "5", "--wait=false", "--plaintext", "--addr", addr)
	expectRun(t, r, 0, []string{"applied version 10\n"}, nil)
	expectRun(t, runCLI(t, "policy", "rollback", "--plaintext", "--addr", addr), 2, nil, []string{`required flag(s) "to" not set`})
	expectRun(t, runCLI(t, "policy", "rollback", "--to", "0", "--plaintext", "--addr", addr), 2, nil, []string{"--to 0: want a policy version"})

	refused := &fakeAdmin{err: status.Error(codes.InvalidArgument, "to: policy version 1 fell off the history, which keeps the last 100 versions and at most 500000 policy changes: the oldest kept is 4")}
	addr = startFakeNode(t, refused)
	expectRun(t, runCLI(t, "policy", "rollback", "--to", "1", "--plaintext", "--addr", addr), 1, nil,
		[]string{"quorate: InvalidArgument: to: policy version 1 fell off the history"})
}
