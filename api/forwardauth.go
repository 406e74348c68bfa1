package api

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/quorate/quorate/internal/httpheaders"
	"github.com/quorate/quorate/policy/extract"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// forwardAuth is /v1/forward-auth, for reverse proxies that ask before
// they forward (Caddy forward_auth, Traefik ForwardAuth, nginx
// auth_request): the request's descriptors come from its headers through
// the policy set's extraction, and it is decided as a descriptor check on
// /v1/limit/check is. 200 with an empty body lets the request through; a
// denial is 429 (503 when the deciding policy fails closed because its
// shard cannot decide), or the status ?deny_status= names, which nginx
// needs (its auth_request passes only 2xx, 401 and 403). Any method: the
// proxies forward the client's.
func (s *server) forwardAuth(w http.ResponseWriter, r *http.Request) {
	id := httpheaders.RequestIDOf(r)
	h := w.Header()
	h.Set(httpheaders.RequestID, id)
	denyStatus, ferr := forwardAuthQuery(r)
	if ferr != nil {
		writeFieldError(w, ferr)
		return
	}
	e := s.b.Extractor().Extract(r)
	httpheaders.SetTrace(h, id, e.TenantID, e.APIKeyID)
	req := &pb.CheckRequest{RequestId: id, Descriptors: extractedDescriptors(&e)}
	resp, err := s.b.Check(httpTraceContext(r, "forward_auth"), req)
	if err != nil {
		slog.Warn("forward-auth: check failed", "request_id", id, "err", err)
		writeRPCError(w, err, checkField)
		return
	}
	a := answer(id, resp)
	d := httpheaders.Decision{Allowed: a.Decision != "DENY", Throttle: a.Decision == "THROTTLE",
		Delay: time.Duration(a.DelayMs) * time.Millisecond, Reason: a.Reason, PolicyID: a.AppliedPolicyID,
		Decided: a.decided, Limit: a.limit, Remaining: a.Remaining,
		Reset: time.Duration(a.ResetAfterMs) * time.Millisecond, RetryAfter: time.Duration(a.RetryAfterMs) * time.Millisecond}
	httpheaders.Set(h, d)
	slog.Debug("forward-auth", "request_id", id, "decision", a.Decision, "reason", a.Reason, "policy", a.AppliedPolicyID,
		"tenant_id", e.TenantID, "route", e.Route, "method", e.Method, "ip", e.IP)
	switch {
	case d.Allowed:
		w.WriteHeader(http.StatusOK)
	case denyStatus != 0:
		w.WriteHeader(denyStatus)
	case a.Reason == "STORE_UNAVAILABLE":
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// forwardAuthQuery reads the one query parameter the route takes. Others
// are ignored, unlike on the other routes: Caddy's forward_auth passes the
// client's query along.
func forwardAuthQuery(r *http.Request) (int, *fieldError) {
	switch v := r.URL.Query().Get("deny_status"); v {
	case "":
		return 0, nil
	case "401":
		return http.StatusUnauthorized, nil
	case "403":
		return http.StatusForbidden, nil
	case "429":
		return http.StatusTooManyRequests, nil
	default:
		return 0, badField("deny_status", "%q: want 401, 403 or 429", v)
	}
}

func extractedDescriptors(e *extract.Extracted) *pb.Descriptors {
	return &pb.Descriptors{
		TenantId: e.TenantID, ApiKeyId: e.APIKeyID, UserId: e.UserID, Ip: e.IP, TenantTier: e.TenantTier,
		Route: e.Route, Method: e.Method, Service: e.Service, Region: e.Region, Custom: e.Custom,
	}
}
