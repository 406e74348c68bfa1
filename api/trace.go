package api

import (
	"net/http"

	"github.com/quorate/quorate/internal/httpheaders"
)

// requestID is a decision request's id: the body's if it gave one, else
// the X-Request-Id header's when it can be trusted into logs, else a new
// one.
func requestID(body string, r *http.Request) string {
	if body != "" {
		return body
	}
	return httpheaders.RequestIDOf(r)
}

// setTraceHeaders sets the answer's trace headers: the id, the decision
// and the deciding policy, and r's subject headers passed through.
func setTraceHeaders(out http.Header, r *http.Request, id, decision, policyID string) {
	httpheaders.SetTrace(out, id, r.Header.Get(httpheaders.TenantID), r.Header.Get(httpheaders.APIKeyID))
	out.Set(httpheaders.RateLimitDecision, decision)
	if policyID != "" {
		out.Set(httpheaders.PolicyID, policyID)
	}
}
