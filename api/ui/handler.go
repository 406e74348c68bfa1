package ui

import (
	"encoding/json"
	"net/http"
	"time"
)

// Config is what the page needs from the node.
type Config struct {
	Source    Source
	Authorize func(token string) bool // true if token may read (the node's read scope)
	Secure    bool                    // served over TLS: the cookie gets the Secure flag
	Clock     func() time.Time        // default time.Now (cookie expiry)
}

// Handler serves the page under /ui/ (mount with mux.Handle("/ui/", ui.Handler(cfg))).
// It panics if cfg has no Source or no Authorize: that is a wiring mistake,
// and a page that answered without them would show nothing or everything.
func Handler(cfg Config) http.Handler {
	if cfg.Source == nil {
		panic("ui: Config.Source is nil")
	}
	if cfg.Authorize == nil {
		panic("ui: Config.Authorize is nil")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	h := &handler{cfg: cfg, fetch: newFetcher(cfg.Source, cfg.Clock)}
	// The forms are the only requests that change anything (the cookie);
	// a cross-site page must not log a browser in with its own token or out.
	xsrf := http.NewCrossOriginProtection()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/{$}", h.index)
	mux.HandleFunc("GET /ui/login", h.loginForm)
	mux.Handle("POST /ui/login", xsrf.Handler(http.HandlerFunc(h.login)))
	mux.Handle("POST /ui/logout", xsrf.Handler(http.HandlerFunc(h.logout)))
	mux.HandleFunc("GET /ui/api/overview", h.overview)
	mux.HandleFunc("GET /ui/static/{file}", serveStatic)
	return withSecurityHeaders(mux)
}

// handler holds the page's configuration; it keeps no per-browser state
// (the session lives in the cookie), so it needs no lock of its own.
type handler struct {
	cfg   Config
	fetch *fetcher
}

// index serves the page to a browser with a session, takes a ?token= link
// (a session, then a redirect that drops the token from the address bar),
// and shows the login form to anyone else.
func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		h.startSession(w, r, r.URL.Query().Get("token"))
		return
	}
	if _, ok := h.sessionToken(r); !ok {
		h.loginForm(w, r)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(indexHTML)
}

// overviewTimeout bounds one fan-out: the page asks again a second later,
// so an answer later than this would be stale anyway.
const overviewTimeout = 5 * time.Second

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="quorate"`)
		writeJSONError(w, http.StatusUnauthorized, "ui: no valid session or read token: log in again, or send Authorization: Bearer <read token>")
		return
	}
	ov, err := h.fetch.get(r.Context())
	if err != nil {
		writeJSONError(w, http.StatusBadGateway, "ui: overview: "+err.Error())
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(ov)
}

func writeJSONError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// contentSecurityPolicy lets the page load only its own files and talk
// only to its own node: no inline script, no frames, no other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func withSecurityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Content-Security-Policy", contentSecurityPolicy)
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("X-Frame-Options", "DENY")
		// A ?token= link must not travel on in a Referer header.
		hdr.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}
