package telemetry

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorate/quorate/telemetry/topk"
)

// Report is one node's own account for the status page and top keys:
// what it decided and saw. The node asked for it is the one that merges
// the reports of every node; it crosses the peer port as JSON.
type Report struct {
	Node          string        `json:"node"`
	Ready         bool          `json:"ready"`
	PolicyVersion uint64        `json:"policy_version"`
	Leases        LeaseReport   `json:"leases"`
	Policies      []PolicyTotal `json:"policies,omitempty"`
	// Top are the top keys the query asked for, one summary per policy,
	// whole (every counter the node's sketch has), so that the merge
	// across nodes keeps the sketch's bound.
	Top      []topk.Summary `json:"top,omitempty"`
	FailOpen []Event        `json:"fail_open,omitempty"`
	// Error says why the node's report is missing (it did not answer).
	Error string `json:"error,omitempty"`
}

// TopQuery says which top keys a report carries.
type TopQuery struct {
	Policy string        // "" every policy
	By     string        // "denied" or "hits"
	Window time.Duration // one of the sketch's windows
	Limit  int           // keys per policy
}

// LeaseReport is a node's lease table at a glance.
type LeaseReport struct {
	Buckets int64 `json:"buckets"`
	Held    int64 `json:"held"`
	Hits    int64 `json:"hits"`
	Misses  int64 `json:"misses"`
}

// PolicyTotal is one policy's decisions since the node started, by
// outcome (the outcomes of quorate_policy_decisions_total).
type PolicyTotal struct {
	ID              string `json:"id"`
	Allowed         uint64 `json:"allowed,omitempty"`
	Denied          uint64 `json:"denied,omitempty"`
	SoftOver        uint64 `json:"soft_over,omitempty"`
	ShadowWouldDeny uint64 `json:"shadow_would_deny,omitempty"`
	FailOpen        uint64 `json:"fail_open,omitempty"`
	Unavailable     uint64 `json:"unavailable,omitempty"`
	Blocked         uint64 `json:"blocked,omitempty"`
	Throttled       uint64 `json:"throttled,omitempty"`
}

// outcomes index a policy's counters; the names are the metric's.
var outcomes = []string{"allowed", "denied", "soft_over", "shadow_would_deny", "fail_open", "unavailable", "blocked", "throttled"}

type outcomeCounts [8]atomic.Uint64

func outcomeIndex(o string) int { return slices.Index(outcomes, o) }

func (c *outcomeCounts) total(id string) PolicyTotal {
	return PolicyTotal{ID: id, Allowed: c[0].Load(), Denied: c[1].Load(), SoftOver: c[2].Load(),
		ShadowWouldDeny: c[3].Load(), FailOpen: c[4].Load(), Unavailable: c[5].Load(), Blocked: c[6].Load(),
		Throttled: c[7].Load()}
}

// Event is one notable decision kept for the status page (a fail-open).
type Event struct {
	Time      time.Time `json:"time"`
	Node      string    `json:"node"`
	Policy    string    `json:"policy"`
	RequestID string    `json:"request_id,omitempty"`
	Reason    string    `json:"reason"`
	Key       string    `json:"key,omitempty"`
}

// Events keeps the last few events, newest last; safe for concurrent use.
type Events struct {
	mu   sync.Mutex
	ring []Event
	next int
	full bool
}

// NewEvents keeps the last n events (at least 1).
func NewEvents(n int) *Events { return &Events{ring: make([]Event, max(n, 1))} }

// Add keeps e, forgetting the oldest when full.
func (r *Events) Add(e Event) {
	r.mu.Lock()
	r.ring[r.next] = e
	r.next = (r.next + 1) % len(r.ring)
	r.full = r.full || r.next == 0
	r.mu.Unlock()
}

// Recent returns the kept events, newest first.
func (r *Events) Recent() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.next
	if r.full {
		n = len(r.ring)
	}
	out := make([]Event, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.ring[(r.next-i+len(r.ring))%len(r.ring)])
	}
	return out
}
