package decide

import "time"

// Observer receives what the engine counts. Its arguments are metric
// label values (stable strings) so that an implementation needs nothing
// from this package; package telemetry has the Prometheus one.
type Observer interface {
	// Request counts one answered request by mode ("strict", "leased",
	// "mixed" for some buckets of each, or "policy" for one decided
	// without buckets: blocked, or no policy).
	// decision is "allow" or "deny".
	Request(mode, decision string, took time.Duration)
	// Item counts one decided bucket by mode ("strict" or "leased"), decision and reason
	// (Reason.String).
	Item(mode, decision, reason string)
	// FailMode counts one item answered by its fail mode: "open",
	// "closed" or "capped" (fail open, its emergency cap spent).
	FailMode(outcome string)
	// Refunds counts n cross-shard refunds by result: "ok" or "failed".
	Refunds(result string, n int)
	// Rerouted counts n items a split's fence sent elsewhere: "sent" to
	// the new shard, or "expired" waiting for the routing.
	Rerouted(outcome string, n int)
	// LeaseFallback counts one leased item no grant covered, decided
	// strictly.
	LeaseFallback()
	// PolicyOutcome counts one descriptor check's verdict of one policy.
	PolicyOutcome(id, outcome string)
	// CapsReset counts a reset of the full emergency-cap table.
	CapsReset()
	// RiskForgotten counts a remembered risk score dropped because the
	// node's risk memory was full.
	RiskForgotten()
}

type nopObserver struct{}

func (nopObserver) Request(string, string, time.Duration) {}
func (nopObserver) Item(string, string, string)           {}
func (nopObserver) FailMode(string)                       {}
func (nopObserver) Refunds(string, int)                   {}
func (nopObserver) Rerouted(string, int)                  {}
func (nopObserver) LeaseFallback()                        {}
func (nopObserver) PolicyOutcome(string, string)          {}
func (nopObserver) CapsReset()                            {}
func (nopObserver) RiskForgotten()                        {}
