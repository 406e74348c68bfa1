package api

import (
	"net/http"
	"strings"

	"github.com/quorate/quorate/internal/httpheaders"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// checkRequest is the HTTP decision contract (the issue's, plus custom
// descriptors, cost, mode and dry_run).
type checkRequest struct {
	RequestID string `json:"request_id"`
	Subject   struct {
		TenantID   string `json:"tenant_id"`
		APIKeyID   string `json:"api_key_id"`
		UserID     string `json:"user_id"`
		IP         string `json:"ip"`
		TenantTier string `json:"tenant_tier"`
	} `json:"subject"`
	Resource struct {
		Route   string `json:"route"`
		Method  string `json:"method"`
		Service string `json:"service"`
	} `json:"resource"`
	Context struct {
		Region         string   `json:"region"`
		RiskScore      *float64 `json:"risk_score"`
		IdempotencyKey string   `json:"idempotency_key"`
	} `json:"context"`
	Descriptors map[string]string `json:"descriptors"`
	Cost        int64             `json:"cost"`
	Mode        string            `json:"mode"`
	DryRun      bool              `json:"dry_run"`
}

// parseCheck turns a check body into the CheckRequest the backend takes.
// What only the node can judge (value lengths, custom descriptor counts) is
// left to it; its errors are mapped back by checkField.
func parseCheck(body []byte) (*pb.CheckRequest, []string, *fieldError) {
	var c checkRequest
	unknown, err := decodeLenient(body, &c)
	if err != nil {
		return nil, nil, err
	}
	req, err := c.toProto()
	return req, unknown, err
}

func (c *checkRequest) toProto() (*pb.CheckRequest, *fieldError) {
	mode, ok := map[string]pb.Mode{"": pb.Mode_MODE_UNSPECIFIED, "strict": pb.Mode_MODE_STRICT,
		"leased": pb.Mode_MODE_LEASED}[strings.ToLower(c.Mode)]
	if !ok {
		return nil, badField("mode", "%q: want strict or leased", c.Mode)
	}
	if r := c.Context.RiskScore; r != nil && !(*r >= 0 && *r <= 1) {
		return nil, badField("context.risk_score", "%v: want a number from 0 to 1", *r)
	}
	if c.Cost < 0 {
		return nil, badField("cost", "%d: must not be negative", c.Cost)
	}
	return &pb.CheckRequest{RequestId: c.RequestID, Mode: mode, DryRun: c.DryRun, Descriptors: c.descriptors()}, nil
}

func (c *checkRequest) descriptors() *pb.Descriptors {
	return &pb.Descriptors{
		TenantId:       c.Subject.TenantID,
		ApiKeyId:       c.Subject.APIKeyID,
		UserId:         c.Subject.UserID,
		Ip:             c.Subject.IP,
		TenantTier:     c.Subject.TenantTier,
		Route:          c.Resource.Route,
		Method:         c.Resource.Method,
		Service:        c.Resource.Service,
		Region:         c.Context.Region,
		RiskScore:      c.Context.RiskScore,
		IdempotencyKey: c.Context.IdempotencyKey,
		Custom:         c.Descriptors,
		Cost:           c.Cost,
	}
}

// jsonPaths are where the JSON contract carries each proto field of a check.
var jsonPaths = map[string]string{
	"descriptors.tenant_id":       "subject.tenant_id",
	"descriptors.api_key_id":      "subject.api_key_id",
	"descriptors.user_id":         "subject.user_id",
	"descriptors.ip":              "subject.ip",
	"descriptors.tenant_tier":     "subject.tenant_tier",
	"descriptors.route":           "resource.route",
	"descriptors.method":          "resource.method",
	"descriptors.service":         "resource.service",
	"descriptors.region":          "context.region",
	"descriptors.risk_score":      "context.risk_score",
	"descriptors.idempotency_key": "context.idempotency_key",
	"descriptors.cost":            "cost",
	"descriptors.custom":          "descriptors",
	"descriptors":                 "body",
}

// checkField renames a field the backend named in proto terms
// (descriptors.ip, descriptors.custom.region2) to its JSON path.
func checkField(f string) string {
	if p, ok := jsonPaths[f]; ok {
		return p
	}
	if name, ok := strings.CutPrefix(f, "descriptors.custom."); ok {
		return "descriptors." + name
	}
	return f
}

func (s *server) check(w http.ResponseWriter, r *http.Request) {
	body, ferr := readBody(w, r, MaxCheckBody)
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	req, unknown, ferr := parseCheck(body)
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	s.ignored("check", unknown)
	req.RequestId = requestID(req.GetRequestId(), r)
	w.Header().Set(httpheaders.RequestID, req.GetRequestId())
	resp, err := s.b.Check(httpTraceContext(r, "http"), req)
	if err != nil {
		writeRPCError(w, err, checkField)
		return
	}
	a := answer(req.GetRequestId(), resp)
	a.setHeaders(w.Header())
	setTraceHeaders(w.Header(), r, a.RequestID, a.Decision, a.AppliedPolicyID)
	writeJSON(w, http.StatusOK, a)
}
