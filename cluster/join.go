package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/quorate/quorate/cluster/meta"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Joining a running cluster. A node with an empty data dir that finds its
// peers already bootstrapped without it asks the meta leader, through any
// of them, to record it (meta.OpJoin); the answer is the record with the node in
// it, which the node saves and opens its (meta) group from. The mover then
// adds it to the meta group and moves replicas to it.

// joinCluster retries the join until it is recorded or ctx ends.
func (n *Node) joinCluster(ctx context.Context) (*meta.Record, error) {
	inc, err := incarnation(n.cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("cluster: join: %w", err)
	}
	self := meta.NodeInfo{ID: n.cfg.NodeID, RPC: n.cfg.RPCAddr, Peer: n.cfg.PeerAddr, HTTP: n.cfg.HTTPAddr, Gossip: n.cfg.GossipAddr,
		Incarnation: inc}
	b, _ := json.Marshal(meta.Command{Op: meta.OpJoin, Node: &self})
	var warned string
	for {
		rec, err := n.tryJoin(ctx, b)
		if rec != nil {
			n.log.Info("joined the cluster", "epoch", rec.Epoch, "nodes", len(rec.Active()))
			return rec, nil
		}
		if err != nil && err.Error() != warned {
			warned = err.Error()
			n.log.Error("joining the cluster", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

const incarnationFile = "incarnation"

// incarnation returns this data dir's random identity, made and saved
// (synced) before the first join is sent.
func incarnation(dir string) (string, error) {
	path := filepath.Join(dir, incarnationFile)
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return string(b), nil
	}
	var buf [16]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", err
	}
	inc := hex.EncodeToString(buf[:])
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(inc); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	return inc, f.Close()
}

// tryJoin sends the join to a bootstrapped peer, then to the meta leader
// it names.
func (n *Node) tryJoin(ctx context.Context, cmd []byte) (*meta.Record, error) {
	peers := n.gossip.Alive()
	addrOf := map[string]string{}
	var first string
	for _, p := range peers {
		addrOf[p.Info.ID] = p.Meta.Peer
		if p.Meta.Bootstrapped && first == "" && p.Info.ID != n.cfg.NodeID {
			first = p.Meta.Peer
		}
	}
	if first == "" {
		return nil, fmt.Errorf("no bootstrapped member in sight yet")
	}
	addr := first
	for range 3 {
		f, err := n.peers.Get(addr)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		reply, err := f.Internal.MetaApply(cctx, &pb.MetaApplyRequest{Command: cmd})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("asking %s: %w", addr, err)
		}
		if reply.GetNotLeader() {
			if addr = addrOf[reply.GetLeaderId()]; addr == "" {
				return nil, fmt.Errorf("the meta group has no leader this node can reach")
			}
			continue
		}
		var res meta.Result
		if err := json.Unmarshal(reply.GetResult(), &res); err != nil {
			return nil, err
		}
		if res.Err != "" {
			return nil, fmt.Errorf("the cluster refuses this node: %s", res.Err)
		}
		if res.Record == nil || res.Record.Validate() != nil {
			return nil, fmt.Errorf("the meta leader answered the join without a valid record")
		}
		return res.Record, nil
	}
	return nil, fmt.Errorf("the meta leader kept moving")
}

// askRecord fetches a peer's record; nil if it has none or cannot answer.
func (n *Node) askRecord(ctx context.Context, peerAddr string) *meta.Record {
	f, err := n.peers.Get(peerAddr)
	if err != nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := f.Internal.Record(cctx, &pb.RecordRequest{})
	if err != nil || len(resp.GetRecord()) == 0 {
		return nil
	}
	var r meta.Record
	if json.Unmarshal(resp.GetRecord(), &r) != nil || r.Validate() != nil {
		return nil
	}
	return &r
}
