package cluster

import (
	"fmt"
	"strings"
	"time"
)

// notReadyEvery is how often a node that is not ready says why.
const notReadyEvery = 2 * time.Second

// throttle lets something happen once per period: at the first due and
// then once a period has passed since the last.
type throttle struct{ last time.Time }

func (t *throttle) due(now time.Time, period time.Duration) bool {
	if !t.last.IsZero() && now.Sub(t.last) < period {
		return false
	}
	t.last = now
	return true
}

// notReadyWhy says what the node waits for before it can decide checks:
// the cluster record, its policies catching up with the meta group, and a
// known leader for every shard (routable).
func (n *Node) notReadyWhy() string {
	n.mu.RLock()
	rec, rg := n.mu.rec, n.mu.ring
	n.mu.RUnlock()
	if rec == nil || rg == nil {
		return "no cluster record yet (bootstrapping, joining or rejoining)"
	}
	var why []string
	if !n.policiesSynced.Load() {
		w := "policies not yet in sync with the meta group"
		if p := n.policyWait.Load(); p != nil {
			w += ": " + *p
		}
		why = append(why, w)
	}
	var leaderless []string
	for _, b := range rg.Bounds() {
		if n.leaderOf(b.Shard) == "" {
			leaderless = append(leaderless, fmt.Sprint(b.Shard))
		}
	}
	switch len(leaderless) {
	case 0:
	case 1:
		why = append(why, "shard "+leaderless[0]+" has no leader this node knows of")
	default:
		why = append(why, "shards "+strings.Join(leaderless, ", ")+" have no leader this node knows of")
	}
	if len(why) == 0 {
		return "checking again" // it became ready meanwhile
	}
	return strings.Join(why, "; ")
}
