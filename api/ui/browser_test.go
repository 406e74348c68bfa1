package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/internal/browser"
)

// EnvScreenshots names a directory for the browser tests' screenshots
// (status.png, login.png); without it, they go to the test's temporary
// directory.
const EnvScreenshots = "QUORATE_UI_SCREENSHOTS"

func screenshotPath(t *testing.T, name string) string {
	dir := os.Getenv(EnvScreenshots)
	if dir == "" {
		dir = t.TempDir()
	}
	return filepath.Join(dir, name)
}

func equals(want string) func(string) bool { return func(v string) bool { return v == want } }

// serve serves the handler at /ui/ of a loopback server on a free port.
func serve(t *testing.T, cfg Config) string {
	mux := http.NewServeMux()
	mux.Handle("/ui/", Handler(cfg))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestStatusPageInBrowser runs the page in a real headless Chromium
// against a fake cluster that the test changes, and waits for the page
// to show each change.
func TestStatusPageInBrowser(t *testing.T) {
	src := newFakeSource()
	src.step = 2 * time.Second // overviews two seconds apart: a rate is the delta over 2
	var revoked atomic.Bool
	url := serve(t, Config{Source: src, Authorize: func(tok string) bool {
		return !revoked.Load() && authorize(tok)
	}})

	b := browser.Start(context.Background(), t)
	b.Open(url + "/ui/?token=" + readToken)
	if loc := b.Location(); loc != url+"/ui/" {
		t.Fatalf("after the token link the address bar shows %q, want %s/ui/ (no token)", loc, url)
	}

	// Three members, each shard's leader.
	b.WaitCount(`#nodes tr[data-node]`, func(n int) bool { return n == 3 })
	for _, s := range []struct{ id, leader string }{{"1", "n1"}, {"2", "n2"}, {"3", "n3"}} {
		b.WaitAttr(`#shards tr[data-shard="`+s.id+`"]`, "data-leader", equals(s.leader))
	}
	if v, _ := b.Attr(`#nodes tr[data-node="n3"]`, "data-policy-version"); v != "6" {
		t.Errorf("n3's policy version shows %q, want 6", v)
	}
	b.WaitAttr("#skew", "data-skew", equals("1"))
	b.WaitAttr(`#under li[data-under-replicated]`, "data-under-replicated", equals("3"))
	b.WaitAttr(`#moves tr[data-move="3"]`, "data-add", equals("n1"))
	b.WaitAttr(`#splits tr[data-split-parent="2"]`, "data-split-child", equals("4"))
	if at, _ := b.Attr(`#splits tr[data-split-parent="2"]`, "data-at"); at != "9223372036854775808" {
		t.Errorf("the split point shows as %s, want 2^63 exactly", at)
	}
	b.WaitAttr(`#failopen tr[data-event="r-91"]`, "data-event-node", equals("n2"))
	// A key is text, never markup.
	if got := b.Text(`#top tr[data-top-policy="api"] td:nth-child(2)`); got != `<img src=x onerror="alert(1)">` || b.Count("#top img") != 0 {
		t.Errorf("a hostile key shows as %q with %d img elements, want its text", got, b.Count("#top img"))
	}

	// A steady load: rates from the totals' deltas.
	src.load("api", Policy{Allowed: 40, Denied: 10})
	b.WaitAttr(`#policies tr[data-policy="api"]`, "data-denied-rate", equals("5"))
	b.WaitAttr(`#policies tr[data-policy="api"]`, "data-allowed-rate", equals("20"))
	b.WaitAttr("#sum-denied", "data-rate", equals("5"))

	// A policy's denied count raised.
	src.load("api", Policy{})
	src.update(func(ov *Overview) { ov.Policies[0].Denied = 5000 })
	b.WaitAttr(`#policies tr[data-policy="api"]`, "data-denied", equals("5000"))
	b.WaitAttr("#health", "data-health", equals("degraded")) // skew, under-replication

	// A node dies: visibly down, and named above the sections. Its counts
	// leave the sums, which fall: the page must show no rate for that
	// interval rather than a negative one. An observer records every
	// rate the page shows.
	b.Eval(`(() => {
		window.seenRates = [];
		new MutationObserver(() => {
			const tr = document.querySelector('#policies tr[data-policy="plan_free"]');
			if (tr) window.seenRates.push(tr.dataset.deniedRate);
		}).observe(document.getElementById("policies"), {childList: true});
	})()`, nil)
	src.update(func(ov *Overview) {
		ov.Policies[1].Allowed -= 100
		ov.Policies[1].Denied -= 30
		ov.Nodes[2].State, ov.Nodes[2].Reachable, ov.Nodes[2].Ready = "dead", false, false
		ov.Nodes[2].Error = "dial tcp 127.0.0.1:7403: connect: connection refused"
		ov.Shards[2].Leader = ""
	})
	b.WaitAttr(`#nodes tr[data-node="n3"]`, "data-state", equals("dead"))
	if class, _ := b.Attr(`#nodes tr[data-node="n3"]`, "class"); !strings.Contains(class, "down") {
		t.Errorf("n3 is dead and its row's class is %q, want it styled down", class)
	}
	msg := b.WaitText(`#errors li[data-error-node="n3"]`, func(s string) bool { return strings.HasPrefix(s, "node n3 unreachable") })
	if !strings.Contains(msg, "connection refused") {
		t.Errorf("the unreachable node's error reads %q, want the reason", msg)
	}
	b.WaitAttr(`#shards tr[data-shard="3"]`, "data-leader", equals(""))
	b.WaitAttr("#health", "data-health", equals("critical"))
	b.WaitAttr("#sum-nodes", "data-alive", equals("2"))

	// Load on the survivors, for a screenshot of a live cluster.
	src.load("api", Policy{Allowed: 360, Denied: 48})
	src.load("plan_free", Policy{Allowed: 80, Denied: 18})
	src.load("free_30_trial", Policy{Allowed: 70, ShadowWouldDeny: 12})
	b.WaitAttr(`#policies tr[data-policy="plan_free"]`, "data-denied-rate", equals("9"))
	var seen []string
	b.Eval("window.seenRates", &seen)
	if !slices.Contains(seen, "") || slices.ContainsFunc(seen, func(r string) bool { return strings.HasPrefix(r, "-") }) {
		t.Errorf("plan_free's denied rates as its total fell and load came: %q, want one interval without a rate and none negative", seen)
	}

	shot := screenshotPath(t, "status.png")
	b.Screenshot(shot)
	t.Logf("screenshot: %s", shot)

	// The session ends (the token revoked): the page says to log in again.
	revoked.Store(true)
	b.WaitAttr(`#errors li[data-error="fetch"]`, "data-status", equals(strconv.Itoa(http.StatusUnauthorized)))
	if got := b.Text(`#errors li[data-error="fetch"]`); got != "overview failed: 401 — log in again" {
		t.Errorf("the page says %q after a 401", got)
	}
	if ex := b.Exceptions(); ex != "" {
		t.Errorf("the page threw:\n%s", ex)
	}
}

// TestLoginInBrowser logs in through the form, as a person does: a wrong
// token gets the form again with the error, the right one the page, and
// logging out the form.
func TestLoginInBrowser(t *testing.T) {
	url := serve(t, Config{Source: newFakeSource(), Authorize: authorize})
	b := browser.Start(context.Background(), t)
	b.Open(url + "/ui/")
	b.WaitVisible("form input#token")

	b.Type("#token", "guess-123")
	b.Click(`form button[type="submit"]`)
	msg := b.WaitText("#login-error", func(s string) bool { return s != "" })
	if !strings.HasPrefix(msg, "token: not accepted") {
		t.Errorf("a wrong token is met with %q", msg)
	}
	shot := screenshotPath(t, "login.png")
	b.Screenshot(shot)
	t.Logf("screenshot: %s", shot)

	b.Type("#token", readToken)
	b.Click(`form button[type="submit"]`)
	b.WaitCount(`#nodes tr[data-node]`, func(n int) bool { return n == 3 })
	if loc := b.Location(); loc != url+"/ui/" {
		t.Errorf("after logging in the address bar shows %q", loc)
	}

	b.Click(`form[action="/ui/logout"] button`)
	b.WaitVisible("form input#token")
	b.Open(url + "/ui/")
	b.WaitVisible("form input#token") // the cookie is gone
	if ex := b.Exceptions(); ex != "" {
		t.Errorf("the page threw:\n%s", ex)
	}
}
