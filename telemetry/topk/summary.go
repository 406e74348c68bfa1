package topk

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Bounds of what a summary may hold; a summary from the network past them
// is refused.
const (
	// MaxK is the most counters a sketch, and entries a summary, may have.
	MaxK = 4096
	// MaxKeyLen is the longest key counted, the state machine's bound on a
	// bucket key (fsm.MaxKeyLen).
	MaxKeyLen = 1024
	// MaxPolicyLen is the longest policy id.
	MaxPolicyLen = 256
	// MaxWireSummaries and MaxWireEntries bound one decoded message.
	MaxWireSummaries = 10000
	MaxWireEntries   = 1 << 20
)

// Kind is what a sketch counts.
type Kind uint8

const (
	// Hits counts every decided check of a key, weighted by its cost.
	Hits Kind = iota
	// Denied counts the checks denied, one each.
	Denied
	numKinds
)

var kindNames = [numKinds]string{Hits: "hits", Denied: "denied"}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// ParseKind reads "hits" or "denied" (a CLI's --by).
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if s == name {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("%w: by is %q, want hits or denied", ErrArgument, s)
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) {
	if k >= numKinds {
		return nil, fmt.Errorf("%w: by is %d", ErrArgument, uint8(k))
	}
	return []byte(kindNames[k]), nil
}

// UnmarshalText reads a kind's name.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := ParseKind(string(b))
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// Summary is what a node answers about one policy's keys in one window:
// the guarantee of the package doc holds for it. It is plain data, sent
// between nodes as JSON; decoding validates it.
type Summary struct {
	Policy string `json:"policy"`
	By     Kind   `json:"by"`
	// Window is the window's length (0 for a bare sketch's summary).
	Window time.Duration `json:"window_ns"`
	// K is the most entries the summary may hold: the sketch's counters,
	// or what Top cut it to.
	K int `json:"k"`
	// N is the total weight observed.
	N int64 `json:"n"`
	// Min bounds the true count of every key not listed (0: none was
	// missed) and the Err of every entry.
	Min int64 `json:"min"`
	// Entries are ordered by count, highest first, when made by this
	// package; a decoded summary may list them in any order.
	Entries []Entry `json:"entries"`
}

// Entry is one key's estimate: its true count is in [Count-Err, Count].
type Entry struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
	Err   int64  `json:"err"`
}

// Top returns the summary cut to its n highest entries, sorted, its Min
// raised to the largest count dropped so that its guarantee still holds.
func (s Summary) Top(n int) Summary {
	n = max(n, 0)
	es := slices.Clone(s.Entries)
	sortEntries(es)
	if n < len(es) {
		s.Min = max(s.Min, es[n].Count)
		es = es[:n:n]
	}
	s.Entries, s.K = es, min(s.K, n)
	return s
}

// UnmarshalJSON decodes a summary and validates it: summaries arrive from
// other nodes, and Merge trusts its inputs' invariants.
func (s *Summary) UnmarshalJSON(b []byte) error {
	type plain Summary // without this method
	var v plain
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("%w: %w", ErrSummary, err)
	}
	if err := Summary(v).Validate(); err != nil {
		return err
	}
	*s = Summary(v)
	return nil
}

// DecodeSummaries reads a JSON array of summaries, as a node answers, and
// validates every one. The caller bounds the bytes read.
func DecodeSummaries(data []byte) ([]Summary, error) {
	var ss []Summary
	if err := json.Unmarshal(data, &ss); err != nil {
		return nil, wrapSummaryErr(err)
	}
	if len(ss) > MaxWireSummaries {
		return nil, fmt.Errorf("%w: %d summaries, at most %d", ErrSummary, len(ss), MaxWireSummaries)
	}
	total := 0
	for _, s := range ss {
		total += len(s.Entries)
	}
	if total > MaxWireEntries {
		return nil, fmt.Errorf("%w: %d entries, at most %d", ErrSummary, total, MaxWireEntries)
	}
	return ss, nil
}

func wrapSummaryErr(err error) error {
	if errors.Is(err, ErrSummary) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrSummary, err)
}
