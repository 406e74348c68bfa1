//go:build screenshot

// Package screenshot takes a screenshot of the status page of a running
// cluster (make screenshot, against make run): it is a test only so that
// it can drive Chromium with internal/browser, and runs only with the
// screenshot build tag.
package screenshot

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/internal/browser"
)

// TestScreenshot opens QUORATE_HTTP's status page (default make run's
// first node) with the read token of QUORATE_DATA's dev credentials and
// saves it to QUORATE_SCREENSHOT once the nodes are shown.
func TestScreenshot(t *testing.T) {
	root := cmp.Or(os.Getenv("QUORATE_ROOT"), "../..")
	addr := cmp.Or(os.Getenv("QUORATE_HTTP"), "127.0.0.1:7501")
	data := cmp.Or(os.Getenv("QUORATE_DATA"), filepath.Join(root, "data"))
	out := cmp.Or(os.Getenv("QUORATE_SCREENSHOT"), filepath.Join(root, "docs", "status-page.png"))
	tok, err := os.ReadFile(filepath.Join(data, "credentials", "prometheus.token"))
	if err != nil {
		t.Fatalf("the read token of make run's cluster: %v (is make run running in this checkout?)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := browser.Start(ctx, t)
	b.Open("http://" + addr + "/ui/?token=" + strings.TrimSpace(string(tok)))
	b.WaitCount(`#nodes tr[data-node]`, func(n int) bool { return n > 0 })
	b.WaitAttr("#updated", "data-time", func(v string) bool { return v != "" })
	b.Screenshot(out)
	t.Logf("saved %s", out)
}
