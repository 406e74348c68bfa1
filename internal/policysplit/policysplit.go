// Package policysplit cuts a policy set too large for one message into
// documents that can be applied one after another.
package policysplit

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/quorate/quorate/policy"
)

// Room, in bytes, that Split leaves in a document for the JSON around the
// policies ({"policies":[...]}) and, for one policy alone, for the request
// around the document.
const (
	docOverhead    = 32
	policyOverhead = 64
)

// Split orders ps so that a policy comes after the one it extends (if that
// is among ps) and cuts them into JSON documents, {"policies": [...]}, of
// at most maxBytes each: applied in order, each part finds its parents
// already in the set. A policy that alone is too large is an error naming
// it; so is no policy at all.
func Split(ps []policy.Policy, maxBytes int) ([]string, error) {
	var parts []string
	var cur []json.RawMessage
	size := 0
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		b, err := json.Marshal(map[string][]json.RawMessage{"policies": cur})
		if err != nil {
			return err
		}
		parts = append(parts, string(b))
		cur, size = nil, 0
		return nil
	}
	for _, i := range parentsFirst(ps) {
		b, err := json.Marshal(&ps[i])
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", ps[i].ID, err)
		}
		if len(b)+policyOverhead > maxBytes {
			return nil, fmt.Errorf("policy %s: %d bytes, more than one message", ps[i].ID, len(b))
		}
		if size+len(b)+1 > maxBytes-docOverhead {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		cur, size = append(cur, b), size+len(b)+1
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, errors.New("no policies in the file")
	}
	return parts, nil
}

// parentsFirst is the order of ps by depth of extends within ps, stable
// within a depth. A cycle is left to the cluster to refuse: its policies
// still come out, each once.
func parentsFirst(ps []policy.Policy) []int {
	byID := make(map[string]int, len(ps))
	for i := range ps {
		byID[ps[i].ID] = i
	}
	depth := make([]int, len(ps))
	for i := range ps {
		d, seen := 0, map[int]bool{i: true}
		for p, ok := byID[ps[i].Extends]; ok && !seen[p]; p, ok = byID[ps[p].Extends] {
			seen[p] = true
			d++
		}
		depth[i] = d
	}
	var order []int
	for d := 0; len(order) < len(ps); d++ {
		for i := range ps {
			if depth[i] == d {
				order = append(order, i)
			}
		}
	}
	return order
}
