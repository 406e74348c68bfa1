package envoyconf

import (
	"slices"
	"strings"

	"github.com/quorate/quorate/policy"
)

// Index is the configuration trees rebuilt from a policy set's imported
// policies, for the reference's walk. Immutable once built.
type Index struct {
	domains map[string]*node
}

type node struct {
	exact   map[[2]string]*node
	wild    []wildChild // in the file's order
	keyOnly map[string]*node
	spec    *Spec // nil: a node only on the way to others
	id      string
}

type wildChild struct {
	key   string
	parts []string // the value split at '*'
	order int
	n     *node
}

func (n *node) hasChildren() bool { return len(n.exact)+len(n.wild)+len(n.keyOnly) > 0 }

// NewIndex indexes the imported policies among ps; others are skipped.
func NewIndex(ps []*policy.Policy) *Index {
	x := &Index{domains: map[string]*node{}}
	for i := range ps {
		s, ok := SpecOf(ps[i])
		if !ok {
			continue
		}
		n := x.domains[s.Domain]
		if n == nil {
			n = &node{}
			x.domains[s.Domain] = n
		}
		for _, st := range s.Path {
			n = n.child(st)
		}
		n.spec, n.id = s, ps[i].ID
	}
	return x
}

func (n *node) child(st Step) *node {
	switch {
	case st.Value == "":
		if c := n.keyOnly[st.Key]; c != nil {
			return c
		}
		if n.keyOnly == nil {
			n.keyOnly = map[string]*node{}
		}
		c := &node{}
		n.keyOnly[st.Key] = c
		return c
	case strings.Contains(st.Value, "*"):
		for _, w := range n.wild {
			if w.key == st.Key && strings.Join(w.parts, "*") == st.Value {
				return w.n
			}
		}
		c := &node{}
		w := wildChild{key: st.Key, parts: strings.Split(st.Value, "*"), order: st.Order, n: c}
		i, _ := slices.BinarySearchFunc(n.wild, w.order, func(a wildChild, o int) int { return a.order - o })
		n.wild = slices.Insert(n.wild, i, w)
		return c
	}
	k := [2]string{st.Key, st.Value}
	if c := n.exact[k]; c != nil {
		return c
	}
	if n.exact == nil {
		n.exact = map[[2]string]*node{}
	}
	c := &node{}
	n.exact[k] = c
	return c
}

// Match is the node a request's descriptor names.
type Match struct {
	// PolicyID and Spec are the node's; Spec is nil when no node with a
	// limit applies: the reference answers OK with no current limit.
	PolicyID string
	Spec     *Spec
}

// Known reports whether the index has the domain.
func (x *Index) Known(domain string) bool { return x.domains[domain] != nil }

// Match walks domain's tree along entries as the reference does: at each
// level the child with the entry's key and value, else the first wildcard
// child (in the file's order) whose key is the entry's and whose pattern
// matches its value, else the child with the entry's key and no value. The
// node's limit applies only if the walk takes every entry; a walk that
// stops early applies none.
func (x *Index) Match(domain string, entries []Entry) Match {
	n := x.domains[domain]
	if n == nil || len(entries) == 0 {
		return Match{}
	}
	for i, e := range entries {
		next := n.exact[[2]string{e.Key, e.Value}]
		if next == nil {
			for _, w := range n.wild {
				if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			next = n.keyOnly[e.Key]
		}
		if next == nil {
			return Match{}
		}
		if i == len(entries)-1 {
			if next.spec == nil {
				return Match{}
			}
			return Match{PolicyID: next.id, Spec: next.spec}
		}
		if !next.hasChildren() {
			return Match{}
		}
		n = next
	}
	return Match{}
}

// wildcardMatch reports whether v matches the pattern split at its '*'s:
// each '*' stands for any run of bytes, possibly empty.
func wildcardMatch(parts []string, v string) bool {
	if len(parts) == 1 {
		return parts[0] == v
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	mid := v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}
