package cliview

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/quorate/quorate/api"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The policy set's history: the versions, and the diff between two.

// historyChanges is how many ids a version's CHANGES column names before
// it counts the rest.
const historyChanges = 4

// History writes the versions of the policy set, newest first, and what
// fell off the history.
func History(w io.Writer, resp *pb.PolicyHistoryResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tTIME (UTC)\tWHO\tOP\tCHANGES")
	for _, v := range resp.GetVersions() {
		when, who := "-", v.GetWho()
		if t := v.GetTime(); t != nil {
			when = t.AsTime().UTC().Format("2006-01-02 15:04:05")
		}
		if who == "" {
			who = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", v.GetVersion(), when, who, versionOp(v), versionChanges(v))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if resp.GetDropped() > 0 {
		_, err := fmt.Fprintf(w, "versions up to %d fell off (%d in all): the history keeps the last %d versions and at most %d changed policies\n",
			resp.GetFellOff(), resp.GetDropped(), resp.GetMaxVersions(), resp.GetMaxChanges())
		return err
	}
	return nil
}

// versionOp is what made a version: "apply policies.yaml", "rollback to 3".
func versionOp(v *pb.PolicyVersion) string {
	switch {
	case v.GetOp() == "rollback":
		return fmt.Sprintf("rollback to %d", v.GetRollbackTo())
	case v.GetSource() != "":
		return v.GetOp() + " " + v.GetSource()
	}
	return v.GetOp()
}

// versionChanges names what a version changed: "+a ~b -c", the first
// historyChanges ids, then how many more; the extraction and blocks.
func versionChanges(v *pb.PolicyVersion) string {
	if v.GetOp() == "baseline" {
		return "(the set when this node began keeping history)"
	}
	var out []string
	shown, total := 0, 0
	for _, k := range []struct {
		sign string
		ids  *pb.PolicyIDs
	}{{"+", v.GetAdded()}, {"~", v.GetChanged()}, {"-", v.GetRemoved()}} {
		total += int(k.ids.GetCount())
		for _, id := range k.ids.GetIds() {
			if shown < historyChanges {
				out = append(out, k.sign+id)
				shown++
			}
		}
	}
	if total > shown {
		out = append(out, fmt.Sprintf("(%d more)", total-shown))
	}
	if v.GetExtraction() {
		out = append(out, "~extraction")
	}
	for _, b := range v.GetBlocks() {
		out = append(out, v.GetOp()+" "+b)
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, " ")
}

// HistoryJSON writes the versions as GET /v1/admin/policies/history
// answers them.
func HistoryJSON(w io.Writer, resp *pb.PolicyHistoryResponse) error {
	b, err := api.HistoryJSON(resp, "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Diff writes how the set changed from one version to another, as a
// change's diff.
func Diff(w io.Writer, resp *pb.PolicyDiffResponse) {
	if d := strings.TrimRight(resp.GetDiff(), "\n"); d != "" {
		fmt.Fprintln(w, d)
		return
	}
	fmt.Fprintf(w, "no changes from version %d to %d\n", resp.GetFrom(), resp.GetTo())
}
