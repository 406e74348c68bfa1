package ui

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/internal/clock"
)

// rig is a handler over a fake source with a manual clock.
type rig struct {
	h     http.Handler
	src   *fakeSource
	clock *clock.Manual
}

func newRig(t *testing.T, mod ...func(*Config)) *rig {
	t.Helper()
	r := &rig{src: newFakeSource(), clock: clock.NewManual(t0)}
	cfg := Config{Source: r.src, Authorize: authorize, Clock: r.clock.Now}
	for _, m := range mod {
		m(&cfg)
	}
	r.h = Handler(cfg)
	return r
}

// req is one request: method and target, then optional body and headers.
type req struct {
	method, target, body string
	header               http.Header
	cookie               *http.Cookie
}

func (r *rig) do(t *testing.T, q req) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if q.body != "" {
		body = strings.NewReader(q.body)
	}
	hr := httptest.NewRequest(q.method, "http://node.test"+q.target, body)
	for k, v := range q.header {
		hr.Header[k] = v
	}
	if q.body != "" && hr.Header.Get("Content-Type") == "" {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if q.cookie != nil {
		hr.AddCookie(q.cookie)
	}
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, hr)
	res := rec.Result()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

// login takes the ?token= link and returns the session cookie it set.
func (r *rig) login(t *testing.T) *http.Cookie {
	t.Helper()
	res, _ := r.do(t, req{method: "GET", target: "/ui/?token=" + url.QueryEscape(readToken)})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("token link: status %d, want 303", res.StatusCode)
	}
	return sessionCookie(t, res)
}

func sessionCookie(t *testing.T, res *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range res.Cookies() {
		if c.Name == cookieName {
			return c
		}
	}
	t.Fatalf("no %s cookie in %q", cookieName, res.Header.Values("Set-Cookie"))
	return nil
}

func isLoginPage(body string) bool { return strings.Contains(body, `action="/ui/login"`) }
func isStatusPage(body string) bool {
	return strings.Contains(body, `id="updated"`) && !isLoginPage(body)
}

func TestUnauthenticatedCallerGetsOnlyLoginAndAssets(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		target string
		code   int
		ctype  string
	}{
		{"/ui/", http.StatusOK, "text/html; charset=utf-8"},
		{"/ui/login", http.StatusOK, "text/html; charset=utf-8"},
		{"/ui/api/overview", http.StatusUnauthorized, "application/json; charset=utf-8"},
		{"/ui/static/app.js", http.StatusOK, "text/javascript; charset=utf-8"},
		{"/ui/static/app.css", http.StatusOK, "text/css; charset=utf-8"},
	} {
		res, body := r.do(t, req{method: "GET", target: tc.target})
		if res.StatusCode != tc.code || res.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("GET %s: %d %q, want %d %q", tc.target, res.StatusCode, res.Header.Get("Content-Type"), tc.code, tc.ctype)
		}
		if strings.HasSuffix(tc.target, "/") || strings.HasSuffix(tc.target, "login") {
			if !isLoginPage(body) || isStatusPage(body) {
				t.Errorf("GET %s without a session: not the login form:\n%s", tc.target, body)
			}
		}
	}
	if n := r.src.callCount(); n != 0 {
		t.Errorf("the source was asked %d times by unauthenticated callers", n)
	}
}

func TestOverviewWithoutCredentialsIs401JSON(t *testing.T) {
	r := newRig(t)
	res, body := r.do(t, req{method: "GET", target: "/ui/api/overview"})
	var e struct{ Error string }
	if err := json.Unmarshal([]byte(body), &e); err != nil || !strings.Contains(e.Error, "log in again") {
		t.Fatalf("401 body %q (%v): want a JSON error saying to log in again", body, err)
	}
	if res.Header.Get("Cache-Control") != "no-store" || res.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("headers %v: want Cache-Control no-store and WWW-Authenticate", res.Header)
	}
}

func TestTokenLinkSetsCookieAndRedirects(t *testing.T) {
	for _, secure := range []bool{false, true} {
		r := newRig(t, func(c *Config) { c.Secure = secure })
		res, body := r.do(t, req{method: "GET", target: "/ui/?token=" + readToken})
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
			t.Fatalf("secure=%v: %d Location %q, want 303 to /ui/", secure, res.StatusCode, res.Header.Get("Location"))
		}
		if strings.Contains(body, readToken) {
			t.Errorf("the redirect's body echoes the token: %q", body)
		}
		c := sessionCookie(t, res)
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/ui/" || c.Secure != secure {
			t.Errorf("secure=%v: cookie %+v: want HttpOnly, SameSite=Strict, Path=/ui/, Secure=%v", secure, c, secure)
		}
		if !c.Expires.Equal(t0.Add(sessionTTL)) || c.MaxAge != int(sessionTTL/time.Second) {
			t.Errorf("cookie expires %v max-age %d, want %v and %d", c.Expires, c.MaxAge, t0.Add(sessionTTL), int(sessionTTL/time.Second))
		}
		res, body = r.do(t, req{method: "GET", target: "/ui/", cookie: c})
		if res.StatusCode != http.StatusOK || !isStatusPage(body) {
			t.Fatalf("GET /ui/ with the cookie: %d, status page %v", res.StatusCode, isStatusPage(body))
		}
		if res.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("page Cache-Control %q, want no-store", res.Header.Get("Cache-Control"))
		}
	}
}

func TestWrongTokenIsRefused(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		name string
		q    req
		msg  string
	}{
		{"link, unknown token", req{method: "GET", target: "/ui/?token=guess-123"}, "token: not accepted"},
		{"link, token without read scope", req{method: "GET", target: "/ui/?token=" + checkToken}, "token: not accepted"},
		{"link, empty", req{method: "GET", target: "/ui/?token="}, "token: empty"},
		{"form, unknown token", req{method: "POST", target: "/ui/login", body: "token=guess-123"}, "token: not accepted"},
		{"form, empty", req{method: "POST", target: "/ui/login", body: "token="}, "token: empty"},
		{"form, oversized token", req{method: "POST", target: "/ui/login", body: "token=" + strings.Repeat("a", maxTokenBytes+1)}, "token: not accepted"},
	} {
		res, body := r.do(t, tc.q)
		if res.StatusCode != http.StatusUnauthorized || !isLoginPage(body) || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %d, login form %v, want 401 and the form saying %q:\n%s", tc.name, res.StatusCode, isLoginPage(body), tc.msg, body)
		}
		if len(res.Cookies()) != 0 {
			t.Errorf("%s: set a cookie: %v", tc.name, res.Cookies())
		}
		for _, tok := range []string{"guess-123", checkToken} {
			if strings.Contains(body, tok) {
				t.Errorf("%s: the page echoes the presented token", tc.name)
			}
		}
	}
}

func TestLoginFormStartsSession(t *testing.T) {
	r := newRig(t)
	res, _ := r.do(t, req{method: "POST", target: "/ui/login", body: "token=" + readToken})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/ui/" {
		t.Fatalf("login: %d to %q, want 303 to /ui/", res.StatusCode, res.Header.Get("Location"))
	}
	res, body := r.do(t, req{method: "GET", target: "/ui/api/overview", cookie: sessionCookie(t, res)})
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `"node":"n1"`) {
		t.Fatalf("overview with the form's cookie: %d %s", res.StatusCode, body)
	}
}

func TestOversizedFormIsRefused(t *testing.T) {
	r := newRig(t)
	res, body := r.do(t, req{method: "POST", target: "/ui/login", body: "token=x&pad=" + strings.Repeat("a", maxFormBytes)})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "form: ") {
		t.Fatalf("oversized form: %d %s, want 400 naming the form", res.StatusCode, body)
	}
}

func TestBearerToken(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		header string
		code   int
	}{
		{"Bearer " + readToken, http.StatusOK},
		{"Bearer " + checkToken, http.StatusUnauthorized},
		{"Bearer ", http.StatusUnauthorized},
		{"Basic " + readToken, http.StatusUnauthorized},
	} {
		res, body := r.do(t, req{method: "GET", target: "/ui/api/overview", header: http.Header{"Authorization": {tc.header}}})
		if res.StatusCode != tc.code {
			t.Errorf("Authorization %q: %d, want %d (%s)", strings.Fields(tc.header)[0], res.StatusCode, tc.code, body)
		}
	}
}

func TestSessionEndsAtExpiryRevocationAndLogout(t *testing.T) {
	var revoked atomic.Bool
	r := newRig(t, func(c *Config) {
		c.Authorize = func(tok string) bool { return !revoked.Load() && authorize(tok) }
	})
	overview := func(c *http.Cookie) int {
		r.clock.Advance(reuseFor) // a fresh answer every time
		res, _ := r.do(t, req{method: "GET", target: "/ui/api/overview", cookie: c})
		return res.StatusCode
	}
	c := r.login(t)
	r.clock.Advance(sessionTTL - reuseFor - time.Second)
	if code := overview(c); code != http.StatusOK {
		t.Fatalf("a second before expiry: %d, want 200", code)
	}
	r.clock.Advance(time.Second)
	if code := overview(c); code != http.StatusUnauthorized {
		t.Fatalf("at expiry: %d, want 401 (an old cookie a browser kept)", code)
	}

	c = r.login(t)
	revoked.Store(true)
	if code := overview(c); code != http.StatusUnauthorized {
		t.Fatalf("after the token was revoked: %d, want 401", code)
	}
	revoked.Store(false)

	res, _ := r.do(t, req{method: "POST", target: "/ui/logout", cookie: c})
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d, want 303", res.StatusCode)
	}
	if cleared := sessionCookie(t, res); cleared.MaxAge >= 0 || cleared.Value != "" || cleared.Path != "/ui/" {
		t.Fatalf("logout's cookie %+v: want an empty one that expires now on /ui/", cleared)
	}
}

func TestForgedCookiesAreRefused(t *testing.T) {
	r := newRig(t)
	future := "99999999999"
	enc := func(s string) string { return strings.SplitN(r.login(t).Value, ".", 2)[0] + "." + b64(s) }
	for _, v := range []string{
		"",
		"garbage",
		future + ".",
		future + "." + b64("guess-123"),
		future + "." + b64(checkToken),
		future + ".!!notbase64",
		"-1." + b64(readToken),
		enc("guess-123"),
	} {
		res, _ := r.do(t, req{method: "GET", target: "/ui/api/overview", cookie: &http.Cookie{Name: cookieName, Value: v}})
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("cookie %q: %d, want 401", v, res.StatusCode)
		}
	}
}

func TestCrossOriginFormsAreRefused(t *testing.T) {
	r := newRig(t)
	for _, target := range []string{"/ui/login", "/ui/logout"} {
		res, _ := r.do(t, req{method: "POST", target: target, body: "token=" + readToken,
			header: http.Header{"Sec-Fetch-Site": {"cross-site"}}})
		if res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
			t.Errorf("cross-site POST %s: %d, cookies %v; want 403 and none", target, res.StatusCode, res.Cookies())
		}
	}
}

func TestOverviewJSONNames(t *testing.T) {
	r := newRig(t)
	res, body := r.do(t, req{method: "GET", target: "/ui/api/overview", header: http.Header{"Authorization": {"Bearer " + readToken}}})
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json; charset=utf-8" || res.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("overview: %d %v", res.StatusCode, res.Header)
	}
	// The page and the node's other readers depend on these names.
	for _, want := range []string{
		`"node":"n1"`, `"time":"2026-12-01T09:00:01Z"`,
		`{"id":"n1","rpc_addr":"127.0.0.1:7401","http_addr":"127.0.0.1:7501","state":"alive","membership":"member","reachable":true,"ready":true,"policy_version":7,"leases":{"buckets":12,"held":340,"hits":9800,"misses":200}}`,
		`{"id":1,"leader":"n1","replicas":["n1","n2","n3"],"term":3,"applied_index":18234}`,
		`"moves":[{"shard":3,"add":"n1","remove":"n4"}]`,
		`"splits":[{"parent":2,"child":4,"at":9223372036854775808}]`,
		`"under_replicated":[3]`, `"policy_version_skew":1`,
		`{"id":"api","mode":"HARD","allowed":4000,"denied":12,"shadow_would_deny":0,"fail_open":2,"soft_over":0,"throttled":0}`,
		`{"policy":"plan_free","key":"tenant_id=t_1","count":250,"err":3}`,
		`"fail_open":[{"time":"2026-12-01T08:59:56Z","node":"n2","policy":"api","request_id":"r-91","reason":"STORE_UNAVAILABLE","key":"api_key_id=k_9"}]`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview JSON lacks %s:\n%s", want, body)
		}
	}
	if strings.Contains(body, `"error"`) {
		t.Errorf("a reachable node's empty error is in the JSON:\n%s", body)
	}
}

func TestOverviewSourceFailureIs502JSON(t *testing.T) {
	r := newRig(t)
	r.src.err = errors.New("meta group has no leader")
	res, body := r.do(t, req{method: "GET", target: "/ui/api/overview", header: http.Header{"Authorization": {"Bearer " + readToken}}})
	var e struct{ Error string }
	_ = json.Unmarshal([]byte(body), &e)
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(e.Error, "meta group has no leader") {
		t.Fatalf("source failure: %d %q, want 502 with the source's error", res.StatusCode, body)
	}
}

func TestStaticAssets(t *testing.T) {
	r := newRig(t)
	c := r.login(t)
	_, page := r.do(t, req{method: "GET", target: "/ui/", cookie: c})
	_, login := r.do(t, req{method: "GET", target: "/ui/login"})
	refs := regexp.MustCompile(`(?:src|href)="(/ui/static/[^"]+)"`).FindAllStringSubmatch(page+login, -1)
	if len(refs) < 3 {
		t.Fatalf("the pages load %d assets, want the stylesheet twice and the script", len(refs))
	}
	for _, ref := range refs {
		res, body := r.do(t, req{method: "GET", target: ref[1]})
		want := string(mustRead("static/" + strings.TrimPrefix(ref[1], "/ui/static/")))
		if res.StatusCode != http.StatusOK || body != want {
			t.Fatalf("GET %s: %d, %d bytes; want 200 and the embedded file", ref[1], res.StatusCode, len(body))
		}
		etag := res.Header.Get("ETag")
		if etag == "" || res.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: ETag %q Cache-Control %q", ref[1], etag, res.Header.Get("Cache-Control"))
		}
		res, _ = r.do(t, req{method: "GET", target: ref[1], header: http.Header{"If-None-Match": {etag}}})
		if res.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag: %d, want 304", ref[1], res.StatusCode)
		}
	}
}

func TestUnknownPathsAndMethods(t *testing.T) {
	r := newRig(t)
	c := r.login(t)
	for _, tc := range []struct {
		method, target string
		code           int
	}{
		{"GET", "/ui/nope", http.StatusNotFound},
		{"GET", "/ui/api/nope", http.StatusNotFound},
		{"GET", "/ui/api/overview/x", http.StatusNotFound},
		{"GET", "/ui/static/", http.StatusNotFound},
		{"GET", "/ui/static/nope.js", http.StatusNotFound},
		{"GET", "/ui/static/index.html", http.StatusNotFound},
		{"GET", "/ui/static/login.html", http.StatusNotFound},
		{"DELETE", "/ui/", http.StatusMethodNotAllowed},
		{"GET", "/ui/logout", http.StatusMethodNotAllowed},
		{"POST", "/ui/api/overview", http.StatusMethodNotAllowed},
	} {
		res, _ := r.do(t, req{method: tc.method, target: tc.target, cookie: c})
		if res.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.target, res.StatusCode, tc.code)
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	r := newRig(t)
	for _, target := range []string{"/ui/", "/ui/api/overview", "/ui/static/app.js", "/ui/nope"} {
		res, _ := r.do(t, req{method: "GET", target: target})
		h := res.Header
		if !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Referrer-Policy") != "no-referrer" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", target, h)
		}
	}
}

func TestHandlerNamesMissingConfig(t *testing.T) {
	for field, cfg := range map[string]Config{
		"Config.Source":    {Authorize: authorize},
		"Config.Authorize": {Source: newFakeSource()},
	} {
		func() {
			defer func() {
				if p, _ := recover().(string); !strings.Contains(p, field) {
					t.Errorf("Handler without %s: panic %q, want one naming the field", field, p)
				}
			}()
			Handler(cfg)
		}()
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
