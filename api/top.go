package api

import (
	"time"

	"github.com/quorate/quorate/api/ui"
	"github.com/quorate/quorate/telemetry"
)

// defaultTopWindow is the window of top keys when the caller names none.
const defaultTopWindow = 5 * time.Minute

// topDenied merges the reports' top keys: of one policy ("" all), at most
// n per policy, most first.
func topDenied(reports []telemetry.Report, policy string, n int) []ui.TopKey {
	return nil
}
