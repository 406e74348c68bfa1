package api

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// sourceName names an HTTP body in the backend's line:column errors.
const sourceName = "body"

func (s *server) listPolicies(w http.ResponseWriter, r *http.Request) {
	resp, err := s.b.ListPolicies(r.Context(), &pb.ListPoliciesRequest{})
	if err != nil {
		writeRPCError(w, err, sameField)
		return
	}
	// The extraction is null for the defaults.
	var ext json.RawMessage
	if e := resp.GetExtraction(); e != "" {
		ext = json.RawMessage(e)
	}
	writeJSON(w, http.StatusOK, struct {
		Version    uint64            `json:"version"`
		Policies   []json.RawMessage `json:"policies"`
		Blocks     []json.RawMessage `json:"blocks"`
		Extraction json.RawMessage   `json:"extraction"`
	}{resp.GetVersion(), rawObjects(resp.GetPolicies()), rawObjects(resp.GetBlocks()), ext})
}

// rawObjects embeds the backend's canonical JSON as it is; one that is not
// JSON fails the encoding (500), rather than reaching a client broken.
func rawObjects(ss []string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(s)
	}
	return out
}

func (s *server) getPolicy(w http.ResponseWriter, r *http.Request) {
	resp, err := s.b.GetPolicy(r.Context(), &pb.GetPolicyRequest{PolicyId: r.PathValue("id")})
	if err != nil {
		writeRPCError(w, err, sameField)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Version uint64          `json:"version"`
		Policy  json.RawMessage `json:"policy"`
	}{resp.GetVersion(), json.RawMessage(resp.GetJson())})
}

// putPolicy applies one policy, without prune: the body's policy_id must be
// the path's, so that a URL never writes another policy than it names.
func (s *server) putPolicy(w http.ResponseWriter, r *http.Request) {
	req, ferr := documentRequest(w, r, "dry_run")
	if ferr == nil {
		ferr = samePolicyID([]byte(req.GetDocument()), r.PathValue("id"))
	}
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	s.apply(w, r, req)
}

func (s *server) applyPolicies(w http.ResponseWriter, r *http.Request) {
	req, ferr := documentRequest(w, r, "prune", "dry_run")
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	s.apply(w, r, req)
}

// documentRequest reads a policy document and the query flags the route
// takes.
func documentRequest(w http.ResponseWriter, r *http.Request, flags ...string) (*pb.ApplyPoliciesRequest, *fieldError) {
	q, ferr := queryFlags(r, flags...)
	if ferr != nil {
		return nil, ferr
	}
	body, ferr := readBody(w, r, MaxDocumentBody)
	if ferr != nil {
		return nil, ferr
	}
	return &pb.ApplyPoliciesRequest{Document: string(body), SourceName: sourceName,
		Prune: q["prune"], DryRun: q["dry_run"]}, nil
}

func (s *server) apply(w http.ResponseWriter, r *http.Request, req *pb.ApplyPoliciesRequest) {
	resp, err := s.b.ApplyPolicies(r.Context(), req)
	writeChanges(w, resp, err)
}

func (s *server) deletePolicy(w http.ResponseWriter, r *http.Request) {
	q, ferr := queryFlags(r, "dry_run")
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	resp, err := s.b.DeletePolicies(r.Context(), &pb.DeletePoliciesRequest{PolicyIds: []string{r.PathValue("id")}, DryRun: q["dry_run"]})
	writeChanges(w, resp, err)
}

// writeChanges answers a change to the policy set.
func writeChanges(w http.ResponseWriter, resp *pb.ApplyPoliciesResponse, err error) {
	if err != nil {
		writeRPCError(w, err, sameField)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Version   uint64   `json:"version"`
		Added     []string `json:"added"`
		Changed   []string `json:"changed"`
		Removed   []string `json:"removed"`
		Unchanged []string `json:"unchanged"`
		Diff      string   `json:"diff"`
		Applied   bool     `json:"applied"`
		Warnings  []string `json:"warnings"`
	}{resp.GetVersion(), list(resp.GetAdded()), list(resp.GetChanged()), list(resp.GetRemoved()),
		list(resp.GetUnchanged()), resp.GetDiff(), resp.GetApplied(), list(resp.GetWarnings())})
}

// list makes an empty list [] rather than null, for clients that iterate.
func list(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

type blockRequest struct {
	Descriptors map[string]string `json:"descriptors"`
	Duration    string            `json:"duration"`
	Reason      string            `json:"reason"`
}

func (s *server) block(w http.ResponseWriter, r *http.Request) {
	req, ferr := parseBlock(w, r)
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	resp, err := s.b.Block(r.Context(), req)
	if err != nil {
		writeRPCError(w, err, sameField)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		BlockID   string `json:"block_id"`
		ExpiresAt string `json:"expires_at"`
		Version   uint64 `json:"version"`
	}{resp.GetBlockId(), resp.GetExpiresAt().AsTime().UTC().Format(time.RFC3339Nano), resp.GetVersion()})
}

func parseBlock(w http.ResponseWriter, r *http.Request) (*pb.BlockRequest, *fieldError) {
	body, ferr := readBody(w, r, MaxCheckBody)
	if ferr != nil {
		return nil, ferr
	}
	var b blockRequest
	if ferr := decodeJSON(body, &b); ferr != nil {
		return nil, ferr
	}
	if len(b.Descriptors) == 0 {
		return nil, badField("descriptors", "required: what to block, e.g. {\"ip\": \"203.0.113.8\"}")
	}
	if b.Duration == "" {
		return nil, badField("duration", "required, e.g. \"10m\"")
	}
	d, err := time.ParseDuration(b.Duration)
	if err != nil || d <= 0 {
		return nil, badField("duration", "%q: want a positive duration such as \"10m\"", b.Duration)
	}
	return &pb.BlockRequest{Descriptors: b.Descriptors, Duration: durationpb.New(d), Reason: b.Reason}, nil
}

func (s *server) unblock(w http.ResponseWriter, r *http.Request) {
	resp, err := s.b.Unblock(r.Context(), &pb.UnblockRequest{BlockId: r.PathValue("id")})
	writeChanges(w, resp, err)
}

func (s *server) explain(w http.ResponseWriter, r *http.Request) {
	body, ferr := readBody(w, r, MaxCheckBody)
	var req *pb.CheckRequest
	if ferr == nil {
		var unknown []string
		req, unknown, ferr = parseCheck(body)
		s.ignored("explain", unknown)
	}
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	resp, err := s.b.Explain(r.Context(), &pb.ExplainRequest{Descriptors: req.GetDescriptors()})
	if err != nil {
		writeRPCError(w, err, checkField)
		return
	}
	writeJSON(w, http.StatusOK, explainAnswerOf(resp))
}

// explainAnswer is an ExplainResponse with its decision in the check's own
// answer form, so that both name reasons alike.
type explainAnswer struct {
	Version  uint64        `json:"version"`
	Tier     string        `json:"tier,omitempty"`
	BlockID  string        `json:"block_id"`
	Matches  []policyMatch `json:"matches"`
	Decision *checkAnswer  `json:"decision"`
}

type policyMatch struct {
	PolicyID  string `json:"policy_id"`
	Selected  bool   `json:"selected"`
	Why       string `json:"why"`
	Layer     string `json:"layer"`
	LayerFrom string `json:"layer_from"`
	Kind      string `json:"kind"`
	KindFrom  string `json:"kind_from"`
}

func explainAnswerOf(resp *pb.ExplainResponse) explainAnswer {
	a := explainAnswer{Version: resp.GetVersion(), Tier: resp.GetTier(), BlockID: resp.GetBlockId(), Matches: []policyMatch{}}
	for _, m := range resp.GetMatches() {
		a.Matches = append(a.Matches, policyMatch{m.GetPolicyId(), m.GetSelected(), m.GetWhy(),
			m.GetLayer(), m.GetLayerFrom(), m.GetKind(), m.GetKindFrom()})
	}
	if d := resp.GetDecision(); d != nil {
		a.Decision = answer("", d)
	}
	return a
}

// queryFlags reads the boolean query parameters names (absent is false)
// and refuses any other, so that a misspelt ?prnue=true is not silently an
// apply without prune.
func queryFlags(r *http.Request, names ...string) (map[string]bool, *fieldError) {
	out := map[string]bool{}
	q := r.URL.Query()
	for _, k := range slices.Sorted(maps.Keys(q)) {
		vs := q[k]
		if !slices.Contains(names, k) {
			return nil, badField(k, "unknown query parameter (this route takes %s)", strings.Join(names, ", "))
		}
		b, err := strconv.ParseBool(vs[len(vs)-1])
		if err != nil {
			return nil, badField(k, "%q: want true or false", vs[len(vs)-1])
		}
		out[k] = b
	}
	return out, nil
}

// top answers GET /v1/admin/top?policy=&by=denied|hits&window=5m&limit=10:
// Admin.TopKeys as JSON.
func (s *server) top(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	names := []string{"policy", "by", "window", "limit"}
	for k := range q {
		if !slices.Contains(names, k) {
			writeFieldError(w, badField(k, "unknown query parameter (this route takes %s)", strings.Join(names, ", ")))
			return
		}
	}
	req := &pb.TopKeysRequest{Policy: q.Get("policy"), By: q.Get("by")}
	if v := q.Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			writeFieldError(w, badField("window", "%q: want a duration: 1m, 5m, 15m or 1h", v))
			return
		}
		req.Window = durationpb.New(d)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			writeFieldError(w, badField("limit", "%q: want a number of keys", v))
			return
		}
		req.Limit = uint32(n)
	}
	resp, err := s.b.TopKeys(r.Context(), req)
	if err != nil {
		writeRPCError(w, err, func(f string) string { return f })
		return
	}
	type key struct {
		Policy string `json:"policy"`
		Key    string `json:"key"`
		Count  uint64 `json:"count"`
		Error  uint64 `json:"error"`
	}
	out := struct {
		Keys        []key    `json:"keys"`
		Unreachable []string `json:"unreachable,omitempty"`
	}{Keys: []key{}, Unreachable: resp.GetUnreachable()}
	for _, k := range resp.GetKeys() {
		out.Keys = append(out.Keys, key{k.GetPolicy(), k.GetKey(), k.GetCount(), k.GetError()})
	}
	writeJSON(w, http.StatusOK, out)
}
