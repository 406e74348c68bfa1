package ui

import (
	"encoding/base64"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	cookieName = "quorate_ui"
	// sessionTTL bounds how long a browser keeps the token: a working day.
	sessionTTL = 12 * time.Hour
	// maxTokenBytes bounds a presented token; real ones are far shorter.
	maxTokenBytes = 1024
	// maxFormBytes bounds the login form's body.
	maxFormBytes = 4 << 10
)

// The cookie holds the token itself, with its expiry:
// "<unix seconds>.<base64url token>". Holding the token rather than a
// session id keeps the handler stateless (nothing to bound or lose), lets
// one login serve every node on the same host (cookies ignore the port),
// and makes revoking a token end its sessions at once, since every request
// asks Authorize again. The expiry is not signed: whoever can edit the
// cookie already holds the token.

// sessionToken is the token of r's session cookie, if it has one that has
// not expired and whose token may still read.
func (h *handler) sessionToken(r *http.Request) (string, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return "", false
	}
	exp, enc, ok := strings.Cut(c.Value, ".")
	if !ok {
		return "", false
	}
	secs, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || !h.cfg.Clock().Before(time.Unix(secs, 0)) {
		return "", false
	}
	tok, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || !h.valid(string(tok)) {
		return "", false
	}
	return string(tok), true
}

// authorized reports whether r may read: a session cookie, or a bearer
// token for scripts.
func (h *handler) authorized(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return h.valid(tok)
	}
	_, ok := h.sessionToken(r)
	return ok
}

func (h *handler) valid(token string) bool {
	return token != "" && len(token) <= maxTokenBytes && h.cfg.Authorize(token)
}

// startSession checks a presented token; if it may read, the browser gets
// the cookie and is sent to the page (303, so that neither a form
// resubmission nor the address bar keeps the token), else the form again.
func (h *handler) startSession(w http.ResponseWriter, r *http.Request, token string) {
	switch {
	case token == "":
		h.showLogin(w, http.StatusUnauthorized, "token: empty. Paste a read token.")
		return
	case !h.valid(token):
		h.showLogin(w, http.StatusUnauthorized, "token: not accepted. It must be a token with the read scope on this node.")
		return
	}
	exp := h.cfg.Clock().Add(sessionTTL)
	h.setCookie(w, strconv.FormatInt(exp.Unix(), 10)+"."+base64.RawURLEncoding.EncodeToString([]byte(token)), exp)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (h *handler) setCookie(w http.ResponseWriter, value string, exp time.Time) {
	c := &http.Cookie{
		Name:     cookieName,
		Value:    value,
		Path:     "/ui/",
		HttpOnly: true,
		Secure:   h.cfg.Secure,
		SameSite: http.SameSiteStrictMode,
	}
	if value == "" {
		c.MaxAge = -1
	} else {
		c.Expires = exp
		c.MaxAge = int(exp.Sub(h.cfg.Clock()).Seconds())
	}
	http.SetCookie(w, c)
}

func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		h.showLogin(w, http.StatusBadRequest, "form: unreadable or over 4 KiB.")
		return
	}
	h.startSession(w, r, r.PostForm.Get("token"))
}

func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	h.setCookie(w, "", time.Time{})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func (h *handler) loginForm(w http.ResponseWriter, _ *http.Request) {
	h.showLogin(w, http.StatusOK, "")
}

// showLogin writes the form with msg as its error. msg never holds the
// presented token: the form is not a way to echo one back.
func (h *handler) showLogin(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = loginTemplate.Execute(w, struct{ Error string }{msg})
}

var loginTemplate = template.Must(template.ParseFS(assets, "static/login.html"))
