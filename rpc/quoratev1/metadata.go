package quoratev1

import (
	"strconv"
	"strings"
)

// LeaderHintHeader is the gRPC response header a node sets on a strict
// RateLimiter.Check it answered for a shard it does not lead: it had to
// forward the shard's items to the leader, one hop more than a client that
// sent them to the leader itself. The header has one value per such shard,
// FormatLeaderHint(shard, leader): the leader's node id as the answering
// node knows it after the decision, empty when it knows of none (an
// election). Routing clients (client.Cluster) read it to learn that
// their view of the cluster is stale; other clients can ignore it.
const LeaderHintHeader = "quorate-leader-hint"

// FormatLeaderHint is one value of LeaderHintHeader: "<shard>=<node id>".
func FormatLeaderHint(shard int, leader string) string {
	return strconv.Itoa(shard) + "=" + leader
}

// ParseLeaderHint is the inverse of FormatLeaderHint. ok is false for a
// value that is not a hint.
func ParseLeaderHint(v string) (shard int, leader string, ok bool) {
	s, leader, found := strings.Cut(v, "=")
	if !found {
		return 0, "", false
	}
	shard, err := strconv.Atoi(s)
	if err != nil || shard < 0 {
		return 0, "", false
	}
	return shard, leader, true
}
