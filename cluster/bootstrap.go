package cluster

import (
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/quorate/quorate/cluster/gossip"
	"github.com/quorate/quorate/cluster/meta"
)

// Bootstrap without a coordinator. Nodes that have no cluster record wait
// until BootstrapExpect of them have met through gossip; each computes the
// record of the first BootstrapExpect alive members (meta.NewRecord depends
// only on them) and advertises its digest as Ready. A node bootstraps only
// once every member of that set advertises the same digest: so no node creates
// its groups before the slowest one has seen the same members, which could
// otherwise find its peers already bootstrapped without it and stay out.
//
// A node that bootstraps advertises a seal: the digest with every member's
// process nonce (random per start). A member that sees a peer already
// bootstrapped joins only if that peer's seal names this very process; a
// node that restarts with an empty data dir has a new nonce, so it is kept
// out, as it must be (its lost Raft state could vote twice in a term).

// bootState is what a node without a record decided from one gossip view.
type bootState struct {
	rec   *meta.Record // the record to bootstrap with, or nil to keep waiting
	ready string       // the digest to advertise as Ready ("" if not a member)
	seal  string       // advertised once bootstrapped
	// lockedOut: peers bootstrapped a cluster this process is not part of.
	lockedOut bool
}

// decideBoot applies the rules above for node self, given the alive
// members sorted by ID.
func decideBoot(self string, expect, shards, replicas int, peers []gossip.Peer) bootState {
	booted := false
	for _, p := range peers {
		booted = booted || p.Meta.Bootstrapped
	}
	if len(peers) < expect {
		return bootState{lockedOut: booted}
	}
	set := peers[:expect]
	infos := make([]meta.NodeInfo, len(set))
	member := false
	for i, p := range set {
		infos[i] = p.Info
		member = member || p.Info.ID == self
	}
	if !member {
		return bootState{lockedOut: booted}
	}
	rec := meta.NewRecord(infos, shards, replicas)
	st := bootState{ready: rec.Digest()}
	st.seal = sealOf(st.ready, set)
	agreed, sealed := true, false
	for _, p := range set {
		agreed = agreed && p.Meta.Ready == st.ready && !p.Meta.Bootstrapped
		sealed = sealed || (p.Meta.Bootstrapped && p.Meta.Seal == st.seal)
	}
	switch {
	case sealed || (agreed && !booted):
		st.rec = rec
	case booted:
		st.lockedOut = true
	}
	return st
}

func sealOf(digest string, set []gossip.Peer) string {
	h := xxhash.New()
	_, _ = h.WriteString(digest)
	for _, p := range set {
		_, _ = h.WriteString("\x00" + p.Meta.Nonce)
	}
	return strconv.FormatUint(h.Sum64(), 16)
}
