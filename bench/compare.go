package bench

// Comparison is one scenario's results: one run per target and, when a
// baseline ran too, the ratio quorate/baseline. It is quorate bench's JSON
// output with --baseline, and one element of a suite's.
type Comparison struct {
	Scenario    string       `json:"scenario"`
	Description string       `json:"description,omitempty"`
	Runs        []*RunResult `json:"runs"`
	Ratio       *Ratio       `json:"ratio,omitempty"`
	// Skipped says why the scenario did not run (for example: the server
	// does not implement its mode yet).
	Skipped string `json:"skipped,omitempty"`
}

// Failed reports whether a run of c sent requests that all failed.
func (c *Comparison) Failed() bool {
	for _, r := range c.Runs {
		if r.AllFailed() {
			return true
		}
	}
	return false
}
