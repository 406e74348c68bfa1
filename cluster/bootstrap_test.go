package cluster

import (
	"fmt"
	"testing"

	"github.com/quorate/quorate/cluster/gossip"
	"github.com/quorate/quorate/cluster/meta"
)

func views(n int) []gossip.Peer {
	out := make([]gossip.Peer, n)
	for i := range out {
		id := fmt.Sprintf("n%d", i+1)
		out[i] = gossip.Peer{
			Info: meta.NodeInfo{ID: id, RPC: fmt.Sprintf("127.0.0.1:74%02d", i), HTTP: fmt.Sprintf("127.0.0.1:75%02d", i), Gossip: fmt.Sprintf("127.0.0.1:76%02d", i)},
			Meta: gossip.Meta{Nonce: fmt.Sprintf("nonce-%d", i)},
		}
	}
	return out
}

func TestDecideBoot(t *testing.T) {
	const expect, shards, replicas = 3, 4, 3
	decide := func(self string, ps []gossip.Peer) bootState {
		return decideBoot(self, expect, shards, replicas, ps)
	}
	// Too few members: wait, advertising nothing.
	if st := decide("n1", views(2)); st.rec != nil || st.ready != "" || st.lockedOut {
		t.Fatalf("two of three: %+v", st)
	}
	// All three met, but n2 has not advertised the digest yet: n1 must
	// wait for it (this is the race: n2 would find its peers bootstrapped).
	ps := views(3)
	st := decide("n1", ps)
	if st.rec != nil || st.ready == "" {
		t.Fatalf("before agreement: %+v, want a digest to advertise and no record", st)
	}
	for i := range ps {
		if i != 1 {
			ps[i].Meta.Ready = st.ready
		}
	}
	if st := decide("n1", ps); st.rec != nil {
		t.Fatal("bootstrapped before every member advertised the digest")
	}
	// Everyone agrees: every member computes the same record.
	ps[1].Meta.Ready = st.ready
	r1, r2 := decide("n1", ps), decide("n2", ps)
	if r1.rec == nil || r2.rec == nil || r1.rec.Digest() != r2.rec.Digest() || r1.seal != r2.seal {
		t.Fatalf("after agreement: %+v / %+v, want the same record and seal", r1, r2)
	}
	// n1 bootstrapped and sealed; n3, whose view of n2 is stale, still
	// joins: the seal names its process.
	ps[0].Meta.Bootstrapped, ps[0].Meta.Seal = true, r1.seal
	stale := append([]gossip.Peer(nil), ps...)
	stale[1].Meta.Ready = ""
	if st := decide("n3", stale); st.rec == nil || st.lockedOut {
		t.Fatalf("a member sealed into the bootstrap: %+v, want the record", st)
	}
	// n3 restarts with an empty data dir (a new nonce): the seal does not
	// name it, and it must stay out even though it computes the same digest.
	lost := append([]gossip.Peer(nil), ps...)
	lost[2].Meta = gossip.Meta{Nonce: "nonce-new", Ready: st.ready}
	if st := decide("n3", lost); st.rec != nil || !st.lockedOut {
		t.Fatalf("a member that lost its data: %+v, want locked out", st)
	}
	// A fourth node is not among the first three.
	four := views(4)
	if st := decide("n4", four); st.rec != nil || st.ready != "" {
		t.Fatalf("a node outside the bootstrap set: %+v", st)
	}
}
