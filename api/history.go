package api

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/cluster/meta"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The policy set's history on the public surface: Admin.PolicyHistory,
// PolicyDiff and RollbackPolicies, and their HTTP routes. History and
// diff read the answering node's replica; a rollback goes through the
// meta leader like any change.

// maxDiffLines bounds a diff's answer: a diff of a whole 500k-policy set
// would not fit in a gRPC message.
const maxDiffLines = 10_000

func (a *admin) PolicyHistory(_ context.Context, req *pb.PolicyHistoryRequest) (*pb.PolicyHistoryResponse, error) {
	st, h := a.f.node.PolicyHistory()
	resp := &pb.PolicyHistoryResponse{Version: st.Version, FellOff: h.FellOff, Dropped: h.Dropped,
		MaxVersions: meta.MaxHistoryVersions, MaxChanges: meta.MaxHistoryChanges}
	for _, e := range h.Newest(int(req.GetLimit())) {
		resp.Versions = append(resp.Versions, policyVersion(e))
	}
	return resp, nil
}

func policyVersion(e meta.HistoryEntry) *pb.PolicyVersion {
	v := &pb.PolicyVersion{Version: e.Version, Who: e.Who, Op: e.Op, Source: e.Source, RollbackTo: e.To,
		Added: ids(e.Added), Changed: ids(e.Changed), Removed: ids(e.Removed), Extraction: e.Extraction, Blocks: e.Blocks}
	if e.At != 0 {
		v.Time = timestamppb.New(time.Unix(0, e.At))
	}
	return v
}

func ids(s meta.IDSample) *pb.PolicyIDs {
	return &pb.PolicyIDs{Count: uint32(s.Count), Ids: s.IDs}
}

// sampleOf is a full list of ids as the history samples them.
func sampleOf(all []string) *pb.PolicyIDs {
	return &pb.PolicyIDs{Count: uint32(len(all)), Ids: all[:min(len(all), meta.MaxHistoryIDs)]}
}

func (a *admin) PolicyDiff(_ context.Context, req *pb.PolicyDiffRequest) (*pb.PolicyDiffResponse, error) {
	st, h := a.f.node.PolicyHistory()
	from, to := req.GetFrom(), req.GetTo()
	if to == 0 {
		to = st.Version
	}
	if from == 0 {
		return nil, badRequest("from", "required: the version to diff from (quorate policy history lists them)")
	}
	if err := versionError("from", st, h, from); err != nil {
		return nil, err
	}
	if err := versionError("to", st, h, to); err != nil {
		return nil, err
	}
	ch, diff, err := meta.Diff(st, h, from, to, maxDiffLines)
	if err != nil {
		return nil, adminError(err)
	}
	return &pb.PolicyDiffResponse{From: from, To: to, Added: sampleOf(ch.Added), Changed: sampleOf(ch.Changed),
		Removed: sampleOf(ch.Removed), Extraction: ch.Extraction, Diff: diff}, nil
}

// versionError is why version v cannot be rebuilt, as bad input in field.
func versionError(field string, st meta.PolicyState, h meta.History, v uint64) error {
	if err := meta.CheckVersion(st, h, v); err != nil {
		return badRequest(field, "%v", err)
	}
	return nil
}

func (a *admin) RollbackPolicies(ctx context.Context, req *pb.RollbackPoliciesRequest) (*pb.ApplyPoliciesResponse, error) {
	if req.GetTo() == 0 {
		return nil, badRequest("to", "required: the version to roll back to (quorate policy history lists them)")
	}
	st, h := a.f.node.PolicyHistory()
	if err := versionError("to", st, h, req.GetTo()); err != nil {
		return nil, err
	}
	return a.changePolicies(ctx, &meta.Command{Op: meta.OpRollback, To: req.GetTo()}, req.GetDryRun())
}

// historyAnswer is PolicyHistoryResponse in the HTTP API's form.
type historyAnswer struct {
	Version     uint64          `json:"version"`
	Versions    []versionAnswer `json:"versions"`
	FellOff     uint64          `json:"fell_off"`
	Dropped     uint64          `json:"dropped"`
	MaxVersions uint32          `json:"max_versions"`
	MaxChanges  uint64          `json:"max_changes"`
}

type versionAnswer struct {
	Version    uint64    `json:"version"`
	Time       *string   `json:"time"` // null for a baseline
	Who        string    `json:"who"`
	Op         string    `json:"op"`
	Source     string    `json:"source"`
	RollbackTo uint64    `json:"rollback_to"`
	Added      idsAnswer `json:"added"`
	Changed    idsAnswer `json:"changed"`
	Removed    idsAnswer `json:"removed"`
	Extraction bool      `json:"extraction"`
	Blocks     []string  `json:"blocks"`
}

type idsAnswer struct {
	Count uint32   `json:"count"`
	IDs   []string `json:"ids"`
}

func idsOf(p *pb.PolicyIDs) idsAnswer { return idsAnswer{p.GetCount(), list(p.GetIds())} }

func historyAnswerOf(resp *pb.PolicyHistoryResponse) historyAnswer {
	a := historyAnswer{Version: resp.GetVersion(), Versions: []versionAnswer{}, FellOff: resp.GetFellOff(),
		Dropped: resp.GetDropped(), MaxVersions: resp.GetMaxVersions(), MaxChanges: resp.GetMaxChanges()}
	for _, v := range resp.GetVersions() {
		va := versionAnswer{Version: v.GetVersion(), Who: v.GetWho(), Op: v.GetOp(), Source: v.GetSource(), RollbackTo: v.GetRollbackTo(),
			Added: idsOf(v.GetAdded()), Changed: idsOf(v.GetChanged()), Removed: idsOf(v.GetRemoved()),
			Extraction: v.GetExtraction(), Blocks: list(v.GetBlocks())}
		if v.GetTime() != nil {
			t := v.GetTime().AsTime().UTC().Format(time.RFC3339Nano)
			va.Time = &t
		}
		a.Versions = append(a.Versions, va)
	}
	return a
}

// HistoryJSON is a PolicyHistory answer as GET /v1/admin/policies/history
// writes it, indented by indent: what `quorate policy history --json`
// prints.
func HistoryJSON(resp *pb.PolicyHistoryResponse, indent string) ([]byte, error) {
	b, err := json.MarshalIndent(historyAnswerOf(resp), "", indent)
	return append(b, '\n'), err
}

// policyHistory answers GET /v1/admin/policies/history?limit=N.
func (s *server) policyHistory(w http.ResponseWriter, r *http.Request) {
	q, ferr := queryUints(r, "limit")
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	if q["limit"] > 1<<32-1 {
		writeFieldError(w, badField("limit", "%d: too large", q["limit"]))
		return
	}
	resp, err := s.b.PolicyHistory(r.Context(), &pb.PolicyHistoryRequest{Limit: uint32(q["limit"])})
	if err != nil {
		writeRPCError(w, err, sameField)
		return
	}
	writeJSON(w, http.StatusOK, historyAnswerOf(resp))
}

// policyDiff answers GET /v1/admin/policies/history/diff?from=A&to=B.
func (s *server) policyDiff(w http.ResponseWriter, r *http.Request) {
	q, ferr := queryUints(r, "from", "to")
	if ferr == nil && q["from"] == 0 {
		ferr = badField("from", "required: the version to diff from")
	}
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	resp, err := s.b.PolicyDiff(r.Context(), &pb.PolicyDiffRequest{From: q["from"], To: q["to"]})
	if err != nil {
		writeRPCError(w, err, sameField)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		From       uint64    `json:"from"`
		To         uint64    `json:"to"`
		Added      idsAnswer `json:"added"`
		Changed    idsAnswer `json:"changed"`
		Removed    idsAnswer `json:"removed"`
		Extraction bool      `json:"extraction"`
		Diff       string    `json:"diff"`
	}{resp.GetFrom(), resp.GetTo(), idsOf(resp.GetAdded()), idsOf(resp.GetChanged()), idsOf(resp.GetRemoved()), resp.GetExtraction(), resp.GetDiff()})
}

// rollback answers POST /v1/admin/policies/rollback?dry_run=true with
// {"to": N}: the changes, as an apply's.
func (s *server) rollback(w http.ResponseWriter, r *http.Request) {
	q, ferr := queryFlags(r, "dry_run")
	var body []byte
	if ferr == nil {
		body, ferr = readBody(w, r, MaxCheckBody)
	}
	var req struct {
		To uint64 `json:"to"`
	}
	if ferr == nil {
		ferr = decodeJSON(body, &req)
	}
	if ferr == nil && req.To == 0 {
		ferr = badField("to", "required: the version to roll back to, e.g. {\"to\": 3}")
	}
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	resp, err := s.b.RollbackPolicies(r.Context(), &pb.RollbackPoliciesRequest{To: req.To, DryRun: q["dry_run"]})
	writeChanges(w, resp, err)
}

// queryUints reads the query parameters names as numbers (absent is 0)
// and refuses any other.
func queryUints(r *http.Request, names ...string) (map[string]uint64, *fieldError) {
	out := map[string]uint64{}
	q := r.URL.Query()
	for _, k := range slices.Sorted(maps.Keys(q)) {
		vs := q[k]
		if !slices.Contains(names, k) {
			return nil, badField(k, "unknown query parameter (this route takes %s)", strings.Join(names, ", "))
		}
		n, err := strconv.ParseUint(vs[len(vs)-1], 10, 64)
		if err != nil {
			return nil, badField(k, "%q: want a whole number", vs[len(vs)-1])
		}
		out[k] = n
	}
	return out, nil
}
