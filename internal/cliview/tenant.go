package cliview

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The tenant assignment: one tenant's plan, a page of them, and a change's
// or an import's outcome.

// TenantSet writes what setting id's plan did.
func TenantSet(w io.Writer, id, plan string, resp *pb.SetTenantsResponse) {
	what := "now on"
	if resp.GetSet() == 0 {
		what = "already on"
	}
	fmt.Fprintf(w, "%s: %s plan %s (assignment version %d, %d tenants)\n", id, what, plan, resp.GetVersion(), resp.GetTenants())
}

// Tenant writes one tenant's plan, and the tier it means when another.
func Tenant(w io.Writer, resp *pb.GetTenantResponse) {
	tier := ""
	if resp.GetTier() != resp.GetPlan() {
		tier = " (tier " + resp.GetTier() + ")"
	}
	fmt.Fprintf(w, "%s: plan %s%s, assignment version %d\n", resp.GetTenantId(), resp.GetPlan(), tier, resp.GetVersion())
}

// TenantJSON writes one tenant's plan as the HTTP API answers it.
func TenantJSON(w io.Writer, resp *pb.GetTenantResponse) error {
	return writeJSONLine(w, struct {
		TenantID string `json:"tenant_id"`
		Plan     string `json:"plan"`
		Tier     string `json:"tier"`
		Version  uint64 `json:"version"`
	}{resp.GetTenantId(), resp.GetPlan(), resp.GetTier(), resp.GetVersion()})
}

// TenantsDeleted writes what deleting assignments did.
func TenantsDeleted(w io.Writer, resp *pb.DeleteTenantsResponse) {
	fmt.Fprintf(w, "deleted %d", resp.GetDeleted())
	if m := resp.GetMissing(); m > 0 {
		fmt.Fprintf(w, " (%d had no plan)", m)
	}
	fmt.Fprintf(w, "; assignment version %d, %d tenants\n", resp.GetVersion(), resp.GetTenants())
}

// Tenants writes a page of the assignment as a table, then how many
// tenants each plan has and how to go on.
func Tenants(w io.Writer, resp *pb.ListTenantsResponse) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tPLAN")
	for _, a := range resp.GetAssignments() {
		fmt.Fprintf(tw, "%s\t%s\n", a.GetTenantId(), a.GetPlan())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var plans []string
	for _, p := range slices.Sorted(maps.Keys(resp.GetPlans())) {
		plans = append(plans, fmt.Sprintf("%s %d", p, resp.GetPlans()[p]))
	}
	fmt.Fprintf(w, "%d of %d tenants, assignment version %d", len(resp.GetAssignments()), resp.GetTenants(), resp.GetVersion())
	if len(plans) > 0 {
		fmt.Fprintf(w, "; plans: %s", strings.Join(plans, ", "))
	}
	fmt.Fprintln(w)
	if n := resp.GetNext(); n != "" {
		fmt.Fprintf(w, "more: --after %s\n", n)
	}
	return nil
}

// TenantsJSON writes a page as the HTTP API answers it.
func TenantsJSON(w io.Writer, resp *pb.ListTenantsResponse) error {
	type assignment struct {
		TenantID string `json:"tenant_id"`
		Plan     string `json:"plan"`
	}
	out := struct {
		Version     uint64            `json:"version"`
		Tenants     uint64            `json:"tenants"`
		Plans       map[string]uint64 `json:"plans"`
		Assignments []assignment      `json:"assignments"`
		Next        string            `json:"next"`
	}{resp.GetVersion(), resp.GetTenants(), resp.GetPlans(), []assignment{}, resp.GetNext()}
	if out.Plans == nil {
		out.Plans = map[string]uint64{}
	}
	for _, a := range resp.GetAssignments() {
		out.Assignments = append(out.Assignments, assignment{a.GetTenantId(), a.GetPlan()})
	}
	return writeJSONLine(w, out)
}

func writeJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// Import is an import's progress or outcome.
type Import struct {
	File                    string
	Lines, Assignments      int // the file's (counted before sending)
	Sent, Chunks            int
	Set, Unchanged, Retries int
	Version, Tenants        uint64
	Took                    time.Duration
}

// ImportProgress writes how far an import has come.
func ImportProgress(w io.Writer, im Import) {
	fmt.Fprintf(w, "%s: %d of %d assignments sent (%d%%), %d chunks, %s\n", im.File, im.Sent, im.Assignments,
		100*im.Sent/max(1, im.Assignments), im.Chunks, Duration(im.Took))
}

// ImportDone writes a finished import.
func ImportDone(w io.Writer, im Import) {
	rate := ""
	if s := im.Took.Seconds(); s > 0 {
		rate = fmt.Sprintf(", %.0f/s", float64(im.Sent)/s)
	}
	fmt.Fprintf(w, "imported %d assignments from %s in %d chunks: %d set, %d unchanged; assignment version %d, %d tenants; took %s%s\n",
		im.Sent, im.File, im.Chunks, im.Set, im.Unchanged, im.Version, im.Tenants, Duration(im.Took), rate)
	if im.Retries > 0 {
		fmt.Fprintf(w, "%d chunks were sent again after an unknown outcome (setting a plan twice changes nothing)\n", im.Retries)
	}
}
