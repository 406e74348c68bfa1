package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
	"github.com/quorate/quorate/policy/tenants"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// TenantBackend is the node's tenant assignment calls, in-process, as the
// HTTP API makes them.
type TenantBackend interface {
	SetTenants(context.Context, *pb.SetTenantsRequest) (*pb.SetTenantsResponse, error)
	DeleteTenants(context.Context, *pb.DeleteTenantsRequest) (*pb.DeleteTenantsResponse, error)
	GetTenant(context.Context, *pb.GetTenantRequest) (*pb.GetTenantResponse, error)
	ListTenants(context.Context, *pb.ListTenantsRequest) (*pb.ListTenantsResponse, error)
	Guard(a Access, h http.Handler) http.Handler
}

type tenantServer struct{ b TenantBackend }

// RegisterTenants adds the routes of the tenant assignment to mux:
// /v1/admin/tenants (GET a page, POST a file of assignments) and
// /v1/admin/tenants/{id} (GET, PUT, DELETE one).
func RegisterTenants(mux *http.ServeMux, b TenantBackend) {
	s := tenantServer{b}
	guard := func(a Access, h http.HandlerFunc) http.Handler { return b.Guard(a, h) }
	mux.Handle("GET /v1/admin/tenants", guard(ReadAccess, s.list))
	mux.Handle("POST /v1/admin/tenants", guard(AdminAccess, s.importFile))
	mux.Handle("/v1/admin/tenants", allowOnly("GET, POST"))
	mux.Handle("GET /v1/admin/tenants/{id}", guard(ReadAccess, s.get))
	mux.Handle("PUT /v1/admin/tenants/{id}", guard(AdminAccess, s.put))
	mux.Handle("DELETE /v1/admin/tenants/{id}", guard(AdminAccess, s.delete))
	mux.Handle("/v1/admin/tenants/{id}", allowOnly("GET, PUT, DELETE"))
}

// tenantField names a SetTenants field as the one-tenant routes do.
func tenantField(f string) string {
	if _, rest, ok := strings.Cut(f, "]."); ok {
		return rest
	}
	if strings.HasPrefix(f, "tenant_ids") {
		return "tenant_id"
	}
	return f
}

func (s tenantServer) get(w http.ResponseWriter, r *http.Request) {
	resp, err := s.b.GetTenant(r.Context(), &pb.GetTenantRequest{TenantId: r.PathValue("id")})
	if err != nil {
		writeRPCError(w, err, tenantField)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		TenantID string `json:"tenant_id"`
		Plan     string `json:"plan"`
		Tier     string `json:"tier"`
		Version  uint64 `json:"version"`
	}{resp.GetTenantId(), resp.GetPlan(), resp.GetTier(), resp.GetVersion()})
}

// put assigns the path's tenant the body's plan: {"plan": "PRO"} (a
// tenant_id in the body must be the path's).
func (s tenantServer) put(w http.ResponseWriter, r *http.Request) {
	body, ferr := readBody(w, r, MaxCheckBody)
	var a struct {
		TenantID *string `json:"tenant_id"`
		Plan     string  `json:"plan"`
	}
	if ferr == nil {
		ferr = decodeJSON(body, &a)
	}
	if ferr == nil && a.TenantID != nil && *a.TenantID != r.PathValue("id") {
		ferr = badField("tenant_id", "%q: the body names another tenant than the path (%q)", *a.TenantID, r.PathValue("id"))
	}
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	resp, err := s.b.SetTenants(r.Context(), &pb.SetTenantsRequest{Assignments: []*pb.TenantAssignment{{TenantId: r.PathValue("id"), Plan: a.Plan}}})
	if err != nil {
		writeRPCError(w, err, tenantField)
		return
	}
	writeJSON(w, http.StatusOK, setAnswer{Version: resp.GetVersion(), Tenants: resp.GetTenants(), Set: resp.GetSet(), Unchanged: resp.GetUnchanged()})
}

type setAnswer struct {
	Version   uint64 `json:"version"`
	Tenants   uint64 `json:"tenants"`
	Set       uint32 `json:"set"`
	Unchanged uint32 `json:"unchanged"`
	Lines     int    `json:"lines,omitempty"`
	Calls     int    `json:"chunks,omitempty"`
}

func (s tenantServer) delete(w http.ResponseWriter, r *http.Request) {
	resp, err := s.b.DeleteTenants(r.Context(), &pb.DeleteTenantsRequest{TenantIds: []string{r.PathValue("id")}})
	if err != nil {
		writeRPCError(w, err, tenantField)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Version uint64 `json:"version"`
		Tenants uint64 `json:"tenants"`
		Deleted uint32 `json:"deleted"`
	}{resp.GetVersion(), resp.GetTenants(), resp.GetDeleted()})
}

func (s tenantServer) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := &pb.ListTenantsRequest{After: q.Get("after"), Plan: q.Get("plan")}
	for k := range q {
		if k != "after" && k != "plan" && k != "limit" {
			writeFieldError(w, badField(k, "unknown query parameter (this route takes after, limit, plan)"))
			return
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeFieldError(w, badField("limit", "%q: want a number of tenants", v))
			return
		}
		req.Limit = uint32(n)
	}
	resp, err := s.b.ListTenants(r.Context(), req)
	if err != nil {
		writeRPCError(w, err, sameField)
		return
	}
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
	writeJSON(w, http.StatusOK, out)
}

// importFile sets the assignments of a JSON lines (or CSV) body as it
// streams in, a chunk of at most meta.MaxTenantChange per change. A
// refused line stops it: the chunks before it are applied, the chunk it is
// in is not, and the error says which lines were applied. Posting the
// fixed file again sets them again, harmlessly.
func (s tenantServer) importFile(w http.ResponseWriter, r *http.Request) {
	var total setAnswer
	firstLine := 1
	err := tenants.Chunks(tenants.NewReader(r.Body), meta.MaxTenantChange, meta.MaxTenantChangeBytes, func(chunk []tenants.Assignment, last int) error {
		resp, err := s.b.SetTenants(r.Context(), &pb.SetTenantsRequest{Assignments: assignmentsPB(chunk)})
		if err != nil {
			return chunkError{lines: fmt.Sprintf("%d..%d", firstLine, last), err: err}
		}
		total.Version, total.Tenants = resp.GetVersion(), resp.GetTenants()
		total.Set += resp.GetSet()
		total.Unchanged += resp.GetUnchanged()
		total.Lines, total.Calls, firstLine = last, total.Calls+1, last+1
		return nil
	})
	applied := fmt.Sprintf("lines 1..%d were applied in %d chunks, none after", total.Lines, total.Calls)
	if total.Calls == 0 {
		applied = "nothing was applied"
	}
	var le *tenants.LineError
	var ce chunkError
	switch {
	case errors.As(err, &le):
		writeFieldError(w, badField("body", "%v; %s", le, applied))
	case errors.As(err, &ce):
		st := status.Convert(ce.err)
		code, ok := grpcHTTP[st.Code()]
		if !ok {
			code = http.StatusInternalServerError
		}
		writeError(w, code, apiError{Code: codeName(st.Code()), Field: "body",
			Message: fmt.Sprintf("lines %s: %s; %s", ce.lines, st.Message(), applied)})
	case err != nil:
		writeFieldError(w, badField("body", "cannot read it: %v; %s", err, applied))
	default:
		writeJSON(w, http.StatusOK, total)
	}
}

// chunkError is a chunk the node refused, with the lines it held.
type chunkError struct {
	lines string
	err   error
}

func (e chunkError) Error() string { return "lines " + e.lines + ": " + e.err.Error() }

func assignmentsPB(as []tenants.Assignment) []*pb.TenantAssignment {
	out := make([]*pb.TenantAssignment, len(as))
	for i, a := range as {
		out[i] = &pb.TenantAssignment{TenantId: a.TenantID, Plan: a.Plan}
	}
	return out
}
