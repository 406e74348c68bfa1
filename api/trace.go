package api

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/quorate/quorate/decide"
)

// The trace headers a request carries through the limiter: the id is read
// (or made) and echoed, the decision and deciding policy are added, and
// the subject's headers pass through, so a gateway's logs and the
// limiter's name the same request.
const (
	HeaderRequestID = "X-Request-Id"
	HeaderPolicyID  = "X-Policy-Id"
	HeaderDecision  = "X-Rate-Limit-Decision"
	HeaderTenantID  = "X-Tenant-Id"
	HeaderAPIKeyID  = "X-Api-Key-Id"
)

// requestID is the request's id: the body's if it gave one, else the
// X-Request-Id header's when it is printable and short enough to log,
// else a new one.
func requestID(body string, h http.Header) string {
	if body != "" {
		return body
	}
	if id := h.Get(HeaderRequestID); id != "" && len(id) <= decide.MaxRequestIDLen && printable(id) {
		return id
	}
	return NewRequestID()
}

// NewRequestID makes a request id: 16 random bytes, hex.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// setTraceHeaders sets the answer's trace headers: the id, the decision
// and the deciding policy, and in's subject headers passed through.
func setTraceHeaders(out, in http.Header, id, decision, policyID string) {
	out.Set(HeaderRequestID, id)
	out.Set(HeaderDecision, decision)
	if policyID != "" {
		out.Set(HeaderPolicyID, policyID)
	}
	for _, k := range []string{HeaderTenantID, HeaderAPIKeyID} {
		if v := in.Get(k); v != "" && len(v) <= decide.MaxRequestIDLen && printable(v) {
			out.Set(k, v)
		}
	}
}
