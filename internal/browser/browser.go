// Package browser drives a headless Chromium for tests of web pages: start it, open a URL, wait for the DOM to reach a state, read it, screenshot it.
package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quorate/quorate/internal/await"
)

// DefaultExecPath is Debian's chromium; EnvExecPath names the variable
// that points elsewhere.
const (
	DefaultExecPath = "/usr/bin/chromium"
	EnvExecPath     = "QUORATE_CHROMIUM"
)

// DefaultTimeout bounds each wait and each action unless Browser.Timeout
// says otherwise; startTimeout bounds the browser's start.
const (
	DefaultTimeout = 15 * time.Second
	startTimeout   = time.Minute
)

// Browser is one headless Chromium with one tab, owned by one test. Its
// methods fail the test (t.Fatalf) when they cannot do what they say, so
// call them from the test's goroutine.
type Browser struct {
	// Timeout bounds each wait and action (DefaultTimeout if zero).
	Timeout time.Duration

	t       testing.TB
	tab     context.Context // the tab's chromedp context
	out     *tail           // Chromium's own output
	console *tail           // what the page wrote to its console
	thrown  *tail           // the page's uncaught exceptions
}

// flags are the command line: headless, no sandbox (tests run as root in
// containers), and every background service off, since those would
// reach for the network (the machines here have none beyond loopback).
func flags(execPath, dir string, out *tail) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(execPath),
		chromedp.UserDataDir(dir),
		chromedp.CombinedOutput(out),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1440, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-client-side-phishing-detection", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("safebrowsing-disable-auto-update", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("password-store", "basic"),
	}
}

// Start starts Chromium with a fresh profile and opens a blank tab; the
// test's cleanup stops it and removes the profile. If the test fails, the
// log shows the end of Chromium's output and of the page's console.
func Start(ctx context.Context, t testing.TB) *Browser {
	t.Helper()
	execPath := DefaultExecPath
	if p := os.Getenv(EnvExecPath); p != "" {
		execPath = p
	}
	if _, err := os.Stat(execPath); err != nil {
		t.Fatalf("browser: no Chromium at %s (set %s, or apt-get install chromium): %v", execPath, EnvExecPath, err)
	}
	dir, err := os.MkdirTemp("", "quorate-chromium-")
	if err != nil {
		t.Fatalf("browser: profile directory: %v", err)
	}
	b := &Browser{t: t, out: newTail(64 << 10), console: newTail(64 << 10), thrown: newTail(16 << 10)}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, flags(execPath, dir, b.out)...)
	tab, cancelTab := chromedp.NewContext(alloc)
	b.tab = tab
	var readers sync.WaitGroup
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the process to exit
		readers.Wait()
		if t.Failed() {
			t.Logf("browser: end of Chromium's output:\n%s", b.out)
			t.Logf("browser: end of the page's console:\n%s", b.console)
		}
		removeProfile(t, dir)
	})
	b.startTab()
	messages := chromedp.Console(tab)
	readers.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			fmt.Fprintf(b.console, "%s\n", m)
			if m.IsException() {
				fmt.Fprintf(b.thrown, "%s\n", m)
			}
		}
	})
	return b
}

// startTab runs the first action, which starts the browser. It must run on
// the tab's own context (a deadline there would end the browser), so the
// bound is a timer that cancels nothing but the wait.
func (b *Browser) startTab() {
	b.t.Helper()
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(b.tab) }()
	select {
	case err := <-done:
		if err != nil {
			b.t.Fatalf("browser: start Chromium: %v", err)
		}
	case <-time.After(startTimeout):
		b.t.Fatalf("browser: Chromium did not start within %s", startTimeout)
	}
}

// removeProfile removes the profile directory; Chromium's helper processes
// can write into it for a moment after the browser exits.
func removeProfile(t testing.TB, dir string) {
	err := await.Wait(10*time.Second, func() error { return os.RemoveAll(dir) })
	if err != nil {
		t.Errorf("browser: remove profile %s: %v", dir, err)
	}
}

func (b *Browser) timeout() time.Duration {
	if b.Timeout > 0 {
		return b.Timeout
	}
	return DefaultTimeout
}

// run runs one action bounded by the timeout.
func run[T any](b *Browser, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(b.tab, b.timeout())
	defer cancel()
	return chromedp.Run(ctx, a)
}

// Open navigates the tab to url and waits for the page to load.
func (b *Browser) Open(url string) {
	b.t.Helper()
	if _, err := run(b, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("browser: open %s: %v", url, err)
	}
}

// WaitVisible waits until an element matching the CSS selector is visible.
func (b *Browser) WaitVisible(selector string) {
	b.t.Helper()
	if _, err := run(b, chromedp.WaitVisible(chromedp.CSS(selector))); err != nil {
		b.t.Fatalf("browser: wait for %s to be visible: %v", selector, err)
	}
}

// Screenshot saves a PNG of the whole page (beyond the window, if longer)
// to path, making its directory.
func (b *Browser) Screenshot(path string) {
	b.t.Helper()
	png, err := run(b, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
}

// Console is what the page has written to its console so far (calls of
// the console API, uncaught exceptions, the browser's log), one message a
// line, the last 64 KiB.
func (b *Browser) Console() string { return b.console.String() }

// Exceptions is the page's uncaught exceptions and unhandled rejections so
// far, one a line (the last 16 KiB): a test that expects none checks it is
// empty.
func (b *Browser) Exceptions() string { return b.thrown.String() }

// Location is the tab's current URL.
func (b *Browser) Location() string {
	b.t.Helper()
	u, err := run(b, chromedp.Location())
	if err != nil {
		b.t.Fatalf("browser: location: %v", err)
	}
	return u
}

// errNotFound says that no element matches a selector.
var errNotFound = errors.New("no element matches")

// jsString is s as a JavaScript string literal (JSON's are JavaScript's).
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}
