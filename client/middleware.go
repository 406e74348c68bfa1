package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/quorate/quorate/decide"
	"github.com/quorate/quorate/internal/httpheaders"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

// Decider decides descriptor checks with a policy set: an Embedded
// limiter, or anything else that runs the decision core.
type Decider interface {
	Check(ctx context.Context, req *decide.Request) (*decide.Answer, error)
	// Policies is the set decided with: its extraction says how a
	// request's descriptors are read from it.
	Policies() *policy.Snapshot
}

// MiddlewareConfig tunes the HTTP middleware and the gRPC interceptors.
// The zero value is the documented default.
type MiddlewareConfig struct {
	// FailClosed answers 503 (UNAVAILABLE) when no decision can be made
	// at all (the limiter has no policy set, or refused the request);
	// default: the request goes through. A shard that cannot decide is
	// not this case: each policy's fail_behavior answers then.
	FailClosed bool
	// MaxDelay bounds how long a shaped request (LEAKY_BUCKET_SHAPING) is
	// held before the handler runs (default 1s); a longer wait is a
	// denial. A THROTTLE is held for its whole delay, which its policy's
	// max_delay bounds, or until the request's context ends: the shaper
	// has already given it its turn.
	MaxDelay time.Duration
	// Logger gets a line, with the request id, for each request the
	// limiter could not decide (default slog.Default()).
	Logger *slog.Logger

	// wait holds a request for d, false if ctx ends first (default
	// sleep; tests record the waits instead).
	wait func(ctx context.Context, d time.Duration) bool
}

func (c *MiddlewareConfig) setDefaults() {
	if c.MaxDelay <= 0 {
		c.MaxDelay = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.wait == nil {
		c.wait = sleep
	}
}

// verdict is what the middleware does with a request.
type verdict struct {
	id      string
	allow   bool
	status  int           // when denied: 429, or 503
	headers http.Header   // the rate-limit and trace headers to answer with
	delay   time.Duration // shaping: wait this long before the handler
	reason  string
	answer  *decide.Answer // nil when no decision was made
}

// decideHTTP decides r: its descriptors read by the policy set's
// extraction, its id its X-Request-Id (or a new one).
func decideHTTP(ctx context.Context, d Decider, cfg *MiddlewareConfig, r *http.Request) verdict {
	v := verdict{id: httpheaders.RequestIDOf(r), headers: http.Header{}}
	var ex extract.Extracted
	if snap := d.Policies(); snap != nil {
		ex = snap.Extractor().Extract(r)
	} else {
		ex = extract.Default().Extract(r)
	}
	httpheaders.SetTrace(v.headers, v.id, ex.TenantID, ex.APIKeyID)
	ans, err := d.Check(ctx, &decide.Request{ID: v.id, Descriptors: descriptorsOf(&ex)})
	if err != nil {
		return undecided(cfg, v, err)
	}
	v.answer = ans
	hd := headerDecision(ans)
	httpheaders.Set(v.headers, hd)
	v.allow, v.reason = hd.Allowed, hd.Reason
	switch {
	case !v.allow && hd.Reason == "STORE_UNAVAILABLE":
		v.status = http.StatusServiceUnavailable
	case !v.allow:
		v.status = http.StatusTooManyRequests
	case ans.Decision == decide.Allow && ans.Delay() > cfg.MaxDelay:
		v.allow, v.status, v.reason = false, http.StatusTooManyRequests, "DELAY_TOO_LONG"
		v.headers.Set(httpheaders.RateLimitDecision, "DENY")
		v.headers.Set(httpheaders.RateLimitReason, v.reason)
		v.headers.Set(httpheaders.RetryAfter, "1")
	default:
		v.delay = ans.Delay()
	}
	return v
}

// undecided is the verdict when the limiter could not decide at all.
func undecided(cfg *MiddlewareConfig, v verdict, err error) verdict {
	cfg.Logger.Warn("rate limit: no decision", "request_id", v.id, "err", err, "fail_closed", cfg.FailClosed)
	v.reason = "FAIL_OPEN"
	v.allow = !cfg.FailClosed
	if !v.allow {
		v.reason, v.status = "STORE_UNAVAILABLE", http.StatusServiceUnavailable
		v.headers.Set(httpheaders.RateLimitDecision, "DENY")
		v.headers.Set(httpheaders.RetryAfter, "1")
	} else {
		v.headers.Set(httpheaders.RateLimitDecision, "ALLOW")
	}
	v.headers.Set(httpheaders.RateLimitReason, v.reason)
	return v
}

// headerDecision is ans as the headers carry it: the deciding policy's
// numbers.
func headerDecision(ans *decide.Answer) httpheaders.Decision {
	hd := httpheaders.Decision{Allowed: ans.Decision.Admits(), Throttle: ans.Decision == decide.Throttle,
		Delay: ans.Delay(), PolicyID: ans.AppliedPolicyID}
	pr, alg, ok := ans.Deciding()
	hd.Reason = ans.Reason.Name(alg)
	if ok {
		hd.Decided = true
		hd.Limit, hd.Remaining, hd.Reset, hd.RetryAfter = pr.Limit, pr.Remaining, pr.ResetAfter, pr.RetryAfter
	}
	return hd
}

func descriptorsOf(ex *extract.Extracted) *decide.Descriptors {
	return &decide.Descriptors{TenantID: ex.TenantID, APIKeyID: ex.APIKeyID, UserID: ex.UserID, IP: ex.IP,
		Route: ex.Route, Method: ex.Method, Service: ex.Service, Region: ex.Region, TenantTier: ex.TenantTier,
		Custom: ex.Custom}
}

// Middleware is net/http middleware that decides each request before the
// handler: the descriptors come from the request by the policy set's
// extraction (docs/forward-auth.md: x-tenant-id, x-api-key-id, ...). A
// denied request is answered 429 (503 when its policy fails closed and
// its shard cannot decide) with Retry-After, and the handler is never
// called. Every answer carries the IETF RateLimit-Policy and RateLimit
// headers and the X-RateLimit-* trio of the deciding policy, and the trace
// headers X-Request-Id, X-Rate-Limit-Decision and X-Policy-Id; the
// handler sees the request id as the request's X-Request-Id. A THROTTLE
// (or a shaping bucket's turn) holds the request for its delay before the
// handler runs, and its answer says so in X-RateLimit-Delay-Ms; if the
// client goes away meanwhile the handler is never called.
func Middleware(d Decider, cfg MiddlewareConfig) func(http.Handler) http.Handler {
	cfg.setDefaults()
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			v := decideHTTP(r.Context(), d, &cfg, r)
			for k, vs := range v.headers {
				w.Header()[k] = vs
			}
			if !v.allow {
				writeDenied(w, v)
				return
			}
			if v.delay > 0 && !cfg.wait(r.Context(), v.delay) {
				return // the client went away while it was held
			}
			r.Header.Set(httpheaders.RequestID, v.id)
			next.ServeHTTP(w, r)
		})
	}
}

func writeDenied(w http.ResponseWriter, v verdict) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(v.status)
	msg := "rate limited"
	if v.status == http.StatusServiceUnavailable {
		msg = "the rate limiter cannot decide and the policy fails closed"
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{
		"code": http.StatusText(v.status), "reason": v.reason, "message": msg, "request_id": v.id,
	}})
}

// sleep waits d, false if ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
