// Package cliview is how the quorate CLI shows what the nodes answer
// (decisions, status, policies, top keys, the decision log): tables and
// lines for humans, the HTTP API's JSON for machines.
package cliview

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/api"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// For a human, a table with durations rounded (Duration) and the verdict
// of each policy as it bears on the request; for machines, the HTTP
// decision API's answer. Reasons are spelt as that API spells them
// everywhere.

// Check writes the decision on an inline-item check for a human.
func Check(w io.Writer, resp *pb.CheckResponse) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "decision\t%s\n", decisionName(resp.GetDecision()))
	for i, r := range resp.GetResults() {
		if len(resp.GetResults()) > 1 {
			fmt.Fprintf(tw, "item\t%d\n", i)
		}
		fmt.Fprintf(tw, "reason\t%s\n", api.ReasonName(r.GetReason(), r.GetAlgorithm()))
		fmt.Fprintf(tw, "limit\t%d\n", r.GetLimit())
		fmt.Fprintf(tw, "remaining\t%d\n", r.GetRemaining())
		fmt.Fprintf(tw, "reset after\t%s\n", Duration(r.GetResetAfter().AsDuration()))
		fmt.Fprintf(tw, "retry after\t%s\n", Duration(r.GetRetryAfter().AsDuration()))
		if d := r.GetDelay().AsDuration(); d != 0 {
			fmt.Fprintf(tw, "delay\t%s\n", Duration(d))
		}
		fmt.Fprintf(tw, "shard\t%d\n", r.GetShard())
		if r.GetIndex() == 0 {
			fmt.Fprintf(tw, "index\t0 (not decided in the log)\n")
		} else {
			fmt.Fprintf(tw, "index\t%d\n", r.GetIndex())
		}
	}
	tw.Flush()
}

// DescriptorCheck writes the decision on a descriptor check and each
// policy's own result, with the HTTP API's reason names.
func DescriptorCheck(w io.Writer, resp *pb.CheckResponse) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "decision\t%s\n", decisionName(resp.GetDecision()))
	if d := resp.GetDelay().AsDuration(); d > 0 {
		fmt.Fprintf(tw, "delay\t%s (act on the request after it)\n", Duration(d))
	}
	fmt.Fprintf(tw, "reason\t%s\n", api.Reason(resp))
	fmt.Fprintf(tw, "applied policy\t%s\n", orDash(resp.GetAppliedPolicyId()))
	fmt.Fprintf(tw, "policy version\t%d\n", resp.GetPolicyVersion())
	if resp.GetDryRun() {
		fmt.Fprintf(tw, "dry run\tyes: nothing consumed\n")
	}
	tw.Flush()
	if len(resp.GetPolicies()) == 0 {
		return
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPOLICY\tLAYER\tMODE\tDECISION\tREASON\tLIMIT\tREMAINING\tRESET AFTER\tRETRY AFTER")
	refunded := false
	for _, p := range resp.GetPolicies() {
		refunded = refunded || p.GetReason() == pb.Reason_REASON_REFUNDED
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", p.GetPolicyId(), orDash(p.GetLayer()),
			modeName(p.GetMode()), policyVerdict(p), api.PolicyReason(p), p.GetLimit(), p.GetRemaining(),
			Duration(p.GetResetAfter().AsDuration()), Duration(p.GetRetryAfter().AsDuration()))
	}
	tw.Flush()
	if refunded {
		fmt.Fprintln(w, "\nALLOW→REFUNDED: the policy allowed; what it took was given back because another policy denied.")
	}
}

// policyVerdict is what one policy did to the request. The wire says DENY
// for a policy whose allowance was refunded because another denied, and for
// a SHADOW or SOFT policy over its limit; neither denied the request.
func policyVerdict(p *pb.PolicyResult) string {
	switch {
	case p.GetReason() == pb.Reason_REASON_REFUNDED:
		return "ALLOW→REFUNDED"
	case p.GetDecision() == pb.Decision_DECISION_DENY &&
		(p.GetMode() == pb.PolicyMode_POLICY_MODE_SOFT || p.GetMode() == pb.PolicyMode_POLICY_MODE_SHADOW):
		return "WOULD DENY (" + strings.ToLower(modeName(p.GetMode())) + ")"
	}
	return decisionName(p.GetDecision())
}

func decisionName(d pb.Decision) string { return strings.TrimPrefix(d.String(), "DECISION_") }

func modeName(m pb.PolicyMode) string { return strings.TrimPrefix(m.String(), "POLICY_MODE_") }

// Duration rounds d for reading: to the millisecond under 10s
// (8.67s), to a tenth of a second under a minute (30.8s), to the second
// above (1m29s). It rounds up, as the decision API does, so that a wait is
// never shown shorter than it is.
func Duration(d time.Duration) string {
	var unit time.Duration
	switch {
	case d <= 0:
		return "0s"
	case d < 10*time.Second:
		unit = time.Millisecond
	case d < time.Minute:
		unit = 100 * time.Millisecond
	default:
		unit = time.Second
	}
	return (((d-1)/unit + 1) * unit).String()
}

// CheckJSON writes resp for machines: a descriptor check as the HTTP
// decision API answers it (api.AnswerJSON), an inline-item check in that
// API's names and spellings (it has no items, so it has no such answer).
func CheckJSON(w io.Writer, requestID string, resp *pb.CheckResponse) error {
	var b []byte
	var err error
	if len(resp.GetPolicies()) > 0 || len(resp.GetResults()) == 0 {
		b, err = api.AnswerJSON(requestID, resp, "  ")
	} else {
		b, err = itemsJSON(requestID, resp)
	}
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ItemCheckJSON is an inline-item check's answer in the decision API's
// terms: each item's numbers in place of a policy's.
type ItemCheckJSON struct {
	RequestID string     `json:"request_id"`
	Decision  string     `json:"decision"`
	Reason    string     `json:"reason"`
	Items     []ItemJSON `json:"items"`
}

// ItemJSON is one item's result.
type ItemJSON struct {
	Decision     string `json:"decision"`
	Reason       string `json:"reason"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	DelayMs      int64  `json:"delay_ms"`
	Shard        int64  `json:"shard"`
	Index        uint64 `json:"index"`
}

func itemsJSON(requestID string, resp *pb.CheckResponse) ([]byte, error) {
	out := ItemCheckJSON{RequestID: requestID, Decision: decisionName(resp.GetDecision()), Reason: api.Reason(resp)}
	for _, r := range resp.GetResults() {
		out.Items = append(out.Items, ItemJSON{
			Decision:     decisionName(r.GetDecision()),
			Reason:       api.ReasonName(r.GetReason(), r.GetAlgorithm()),
			Algorithm:    strings.TrimPrefix(r.GetAlgorithm().String(), "ALGORITHM_"),
			Limit:        r.GetLimit(),
			Remaining:    r.GetRemaining(),
			ResetAfterMs: ceilMs(r.GetResetAfter()),
			RetryAfterMs: ceilMs(r.GetRetryAfter()),
			DelayMs:      ceilMs(r.GetDelay()),
			Shard:        r.GetShard(),
			Index:        r.GetIndex(),
		})
	}
	b, err := json.MarshalIndent(out, "", "  ")
	return append(b, '\n'), err
}

// ceilMs rounds up to whole milliseconds, as the decision API does.
func ceilMs(d *durationpb.Duration) int64 {
	if v := d.AsDuration(); v > 0 {
		return int64((v-1)/time.Millisecond) + 1
	}
	return 0
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// RPCError renders a call's gRPC error as "Code: message", the way
// operators look it up, with a hint for the two codes that mean "no
// answer": addr is where the call went, timeout its --timeout.
func RPCError(err error, addr string, timeout time.Duration) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := fmt.Sprintf("%s: %s", st.Code(), st.Message())
	switch st.Code() {
	case codes.Unavailable:
		msg += fmt.Sprintf(" (is a node listening on %s?)", addr)
	case codes.DeadlineExceeded:
		msg += fmt.Sprintf(" (no answer from %s within --timeout %v)", addr, timeout)
	}
	return errors.New(msg)
}
