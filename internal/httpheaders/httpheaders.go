// Package httpheaders writes a rate-limit decision as HTTP headers, the
// same way wherever quorate answers HTTP: forward auth and the Go
// middleware. It is pure: no I/O, no clock, no quorate types.
//
// The headers (docs/forward-auth.md):
//
//	RateLimit-Policy: "<policy>";q=<limit>                  (draft-ietf-httpapi-ratelimit-headers)
//	RateLimit: "<policy>";r=<remaining>;t=<reset seconds>
//	X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (seconds)
//	Retry-After: <seconds>                                  (denials only; at least 1)
//	X-RateLimit-Delay-Ms: <milliseconds>                    (THROTTLE, shaping: hold the request this long)
//	X-Request-Id, X-Policy-Id, X-Rate-Limit-Decision, X-Rate-Limit-Reason
//	X-Tenant-Id, X-Api-Key-Id                              (passed through)
package httpheaders

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The header names, canonical.
const (
	RateLimitPolicy    = "Ratelimit-Policy"
	RateLimit          = "Ratelimit"
	XRateLimitLimit    = "X-Ratelimit-Limit"
	XRateLimitRemain   = "X-Ratelimit-Remaining"
	XRateLimitReset    = "X-Ratelimit-Reset"
	RetryAfter         = "Retry-After"
	RequestID          = "X-Request-Id"
	PolicyID           = "X-Policy-Id"
	RateLimitDecision  = "X-Rate-Limit-Decision"
	RateLimitReason    = "X-Rate-Limit-Reason"
	RateLimitDelay     = "X-Ratelimit-Delay-Ms"
	TenantID           = "X-Tenant-Id"
	APIKeyID           = "X-Api-Key-Id"
	maxRequestIDLength = 256
)

// Decision is what a check decided, as the headers carry it.
type Decision struct {
	// Allowed is the decision; Reason names why (WITHIN_LIMIT,
	// TOKEN_BUCKET_EMPTY, STORE_UNAVAILABLE, ...). Throttle, with
	// Allowed, is a THROTTLE: admitted after Delay.
	Allowed  bool
	Throttle bool
	// Delay is how long an admitted request is to be held (a THROTTLE, or
	// a shaping bucket's turn): X-RateLimit-Delay-Ms when positive.
	Delay  time.Duration
	Reason string
	// PolicyID is the deciding policy ("" when none matched).
	PolicyID string
	// Decided says a policy's bucket gave Limit, Remaining and Reset; when
	// false (no policy matched, an emergency block) no rate-limit numbers
	// are written.
	Decided          bool
	Limit, Remaining int64
	// Reset is when the bucket is full again; RetryAfter when a denied
	// request may be tried again (0: unknown).
	Reset, RetryAfter time.Duration
}

// Seconds rounds d up to whole seconds, so a wait is never reported
// shorter than it is.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d-1)/time.Second) + 1
}

// Set writes d's rate-limit headers to h: the IETF RateLimit-Policy and
// RateLimit fields and the X-RateLimit trio when a policy decided,
// X-Policy-Id and X-Rate-Limit-Decision (ALLOW, THROTTLE or DENY) and
// -Reason always, X-RateLimit-Delay-Ms (milliseconds, rounded up) for an
// admitted request with a wait, and on a denial Retry-After in whole seconds, rounded up and at
// least 1 (a client told 0 would retry at once).
func Set(h http.Header, d Decision) {
	decision := "DENY"
	switch {
	case d.Allowed && d.Throttle:
		decision = "THROTTLE"
	case d.Allowed:
		decision = "ALLOW"
	}
	h.Set(RateLimitDecision, decision)
	if d.Allowed && d.Delay > 0 {
		h.Set(RateLimitDelay, strconv.FormatInt(int64((d.Delay-1)/time.Millisecond)+1, 10))
	}
	if d.Reason != "" {
		h.Set(RateLimitReason, d.Reason)
	}
	if d.PolicyID != "" {
		h.Set(PolicyID, d.PolicyID)
	}
	if d.Decided {
		name := quote(d.PolicyID)
		limit, remaining, reset := strconv.FormatInt(d.Limit, 10), strconv.FormatInt(max(d.Remaining, 0), 10), strconv.FormatInt(Seconds(d.Reset), 10)
		h.Set(RateLimitPolicy, name+";q="+limit)
		h.Set(RateLimit, name+";r="+remaining+";t="+reset)
		h.Set(XRateLimitLimit, limit)
		h.Set(XRateLimitRemain, remaining)
		h.Set(XRateLimitReset, reset)
	}
	if !d.Allowed {
		h.Set(RetryAfter, strconv.FormatInt(max(Seconds(d.RetryAfter), 1), 10))
	}
}

// quote writes s as a structured-field string (RFC 8941): printable ASCII
// with " and \ escaped; anything else (policy ids never hold it) becomes ?.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// RequestIDOf is r's X-Request-Id when it is one to trust into logs (1 to
// 256 printable ASCII characters), else a new random one: every request
// gets an id that its log lines and answer carry.
func RequestIDOf(r *http.Request) string {
	if id := r.Header.Get(RequestID); validRequestID(id) {
		return id
	}
	return NewRequestID()
}

// NewRequestID is 16 random bytes in hex.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// SetTrace writes the trace headers: the request id, and the tenant and
// API key ids the request carried (passed through, empty ones left out).
func SetTrace(h http.Header, requestID, tenantID, apiKeyID string) {
	h.Set(RequestID, requestID)
	if tenantID != "" {
		h.Set(TenantID, tenantID)
	}
	if apiKeyID != "" {
		h.Set(APIKeyID, apiKeyID)
	}
}
