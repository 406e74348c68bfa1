package meta

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/extract"
)

// PolicyState is the replicated policy set. Version counts changes; it is
// what every decision and `quorate status` report.
type PolicyState struct {
	Version  uint64           `json:"version"`
	Policies []*policy.Policy `json:"policies,omitempty"` // shared with the snapshot: never modified
	Blocks   []policy.Block   `json:"blocks,omitempty"`
	// Extraction is how descriptors are read from HTTP requests; nil for
	// the defaults (and in every state from before it existed).
	Extraction *extract.Extraction `json:"extraction,omitempty"`
}

// Bounds of the replicated policy set: the set lives in every node's memory
// and in one Raft entry per change.
const (
	MaxPolicies = 500_000
	MaxBlocks   = 10_000
	MaxBlockFor = 7 * 24 * time.Hour
)

// Meta ops that change the policy set.
const (
	OpApply   = "apply"   // Policies, Prune
	OpDelete  = "delete"  // IDs
	OpBlock   = "block"   // Block
	OpUnblock = "unblock" // IDs
	// OpRollback makes the set equal to an earlier version's (rollback.go):
	// Policies are put, IDs removed and Extraction set (nil: the
	// defaults), if the set is still at version Base; To names the
	// version, for the history.
	OpRollback = "rollback"
)

// Code says why a command was refused.
type Code int

// The codes of Result.Code.
const (
	CodeOK       Code = iota
	CodeInvalid       // the command does not apply to the state
	CodeNotFound      // it names a policy or block the state does not hold
	// CodeStale: a rollback computed against another version than the
	// set's (it changed meanwhile, or the proposing replica was behind).
	CodeStale
)

// NextPolicies computes what a policy command c makes of the set cur with
// the live blocks, at the command's time now: the next set, the changes,
// the block c adds (if any), or why it is refused. It changes nothing: the
// meta state machine applies its result, and a node previews a dry run
// with it.
func NextPolicies(cur []*policy.Policy, blocks []policy.Block, c *Command, now time.Time) ([]*policy.Policy, policy.Changes, *policy.Block, Code, error) {
	switch c.Op {
	case OpApply:
		if _, err := extract.Compile(c.Extraction); err != nil {
			return nil, policy.Changes{}, nil, CodeInvalid, err
		}
		next, ch, err := policy.ApplySet(cur, c.Policies, c.Prune, now)
		if err == nil && len(next) > MaxPolicies {
			err = fmt.Errorf("the set would hold %d policies, more than the cluster's maximum of %d", len(next), MaxPolicies)
		}
		if err != nil {
			return nil, ch, nil, CodeInvalid, err
		}
		return next, ch, nil, CodeOK, nil
	case OpDelete:
		next, ch, err := policy.Delete(cur, c.IDs)
		if err != nil {
			return nil, ch, nil, CodeNotFound, err
		}
		return next, ch, nil, CodeOK, nil
	case OpBlock:
		if c.Block == nil {
			return nil, policy.Changes{}, nil, CodeInvalid, errors.New("block: missing")
		}
		if len(blocks) >= MaxBlocks {
			return nil, policy.Changes{}, nil, CodeInvalid, fmt.Errorf("%d emergency blocks are active, the cluster's maximum", MaxBlocks)
		}
		b := *c.Block
		if b.ExpiresAt.After(now.Add(MaxBlockFor + time.Minute)) {
			// The proposer bounds the duration by its own clock; the log's
			// time bounds it again, a minute's skew allowed.
			return nil, policy.Changes{}, nil, CodeInvalid, fmt.Errorf("block: expires %s, more than %s after the meta leader's time", b.ExpiresAt.Format(time.RFC3339), MaxBlockFor)
		}
		b.ID = fmt.Sprintf("block-%d", c.Now)
		return cur, policy.Changes{}, &b, CodeOK, nil
	case OpRollback:
		next, ch, err := nextRollback(cur, c, now)
		if err == nil && len(next) > MaxPolicies {
			err = fmt.Errorf("the set would hold %d policies, more than the cluster's maximum of %d", len(next), MaxPolicies)
		}
		if err != nil {
			return nil, ch, nil, CodeInvalid, err
		}
		return next, ch, nil, CodeOK, nil
	case OpUnblock:
		for _, id := range c.IDs {
			if !slices.ContainsFunc(blocks, func(b policy.Block) bool { return b.ID == id }) {
				return nil, policy.Changes{}, nil, CodeNotFound, fmt.Errorf("no active emergency block %q", id)
			}
		}
		return cur, policy.Changes{}, nil, CodeOK, nil
	}
	return nil, policy.Changes{}, nil, CodeInvalid, fmt.Errorf("unknown meta command %q", c.Op)
}

// LiveBlocks drops the blocks that expired by now. The state machine drops
// them at the log's time, so every replica drops the same ones.
func LiveBlocks(bs []policy.Block, now time.Time) []policy.Block {
	out := bs[:0:0]
	for _, b := range bs {
		if now.Before(b.ExpiresAt) {
			out = append(out, b)
		}
	}
	return out
}

// NextExtraction is the extraction an apply command c makes of cur: the
// command's own if it carries one; with prune (the document is the whole
// set) the defaults if it does not; else cur. A rollback's is its own
// (nil: the defaults). Normalized: nil for the defaults.
func NextExtraction(cur *extract.Extraction, c *Command) *extract.Extraction {
	switch {
	case c.Op == OpRollback:
		return extract.Normal(c.Extraction)
	case c.Op != OpApply:
		return cur
	case c.Extraction != nil:
		return extract.Normal(c.Extraction)
	case c.Prune:
		return nil
	}
	return cur
}
