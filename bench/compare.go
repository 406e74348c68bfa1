package bench

// Comparison is one scenario's results: one run per target (quorate first,
// then each baseline) and, when baselines ran too, the ratios
// quorate/baseline. It is quorate bench's JSON output with --baseline, and
// one element of a suite's.
type Comparison struct {
	Scenario    string       `json:"scenario"`
	Description string       `json:"description,omitempty"`
	Runs        []*RunResult `json:"runs"`
	// Ratio is quorate against the first baseline (Ratios[0]), as it was
	// when there could be only one.
	Ratio *Ratio `json:"ratio,omitempty"`
	// Ratios is quorate against each baseline, in the order of Runs[1:].
	Ratios []*Ratio `json:"ratios,omitempty"`
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
