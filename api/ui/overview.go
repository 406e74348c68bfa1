package ui

import (
	"context"
	"time"
)

// Overview is the cluster as one node sees it, with its peers' own reports merged in.
type Overview struct {
	Node              string    `json:"node"` // the node that answered
	Time              time.Time `json:"time"`
	Nodes             []Node    `json:"nodes"`
	Shards            []Shard   `json:"shards"`
	Moves             []Move    `json:"moves"`
	Splits            []Split   `json:"splits"`
	UnderReplicated   []uint32  `json:"under_replicated"`
	PolicyVersionSkew uint64    `json:"policy_version_skew"`
	Policies          []Policy  `json:"policies"`
	TopDenied         []TopKey  `json:"top_denied"`
	FailOpen          []Event   `json:"fail_open"` // newest first, bounded
}

// Node is one member of the cluster as the answering node sees it.
type Node struct {
	ID            string `json:"id"`
	RPCAddr       string `json:"rpc_addr"`
	HTTPAddr      string `json:"http_addr"`
	State         string `json:"state"`      // alive | suspect | dead | left
	Membership    string `json:"membership"` // e.g. member, joining, leaving
	Reachable     bool   `json:"reachable"`  // answered the overview fan-out
	Ready         bool   `json:"ready"`
	PolicyVersion uint64 `json:"policy_version"`
	Leases        Leases `json:"leases"`
	Error         string `json:"error,omitempty"` // why unreachable
}

// Leases is a node's lease table: how many buckets it holds budget for,
// how much budget, and how often a leased check found it there.
type Leases struct {
	Buckets int64  `json:"buckets"`
	Held    int64  `json:"held"`
	Hits    uint64 `json:"hits"`
	Misses  uint64 `json:"misses"`
}

// Shard is one Raft group of the key space.
type Shard struct {
	ID           uint32   `json:"id"`
	Leader       string   `json:"leader"`
	Replicas     []string `json:"replicas"`
	Term         uint64   `json:"term"`
	AppliedIndex uint64   `json:"applied_index"`
}

// Move is a replica move in progress: Add joins the shard, then Remove leaves it.
type Move struct {
	Shard  uint32 `json:"shard"`
	Add    string `json:"add"`
	Remove string `json:"remove"`
}

// Split is a shard split in progress: Child takes Parent's range from At.
type Split struct {
	Parent uint32 `json:"parent"`
	Child  uint32 `json:"child"`
	At     uint64 `json:"at"`
}

// Policy holds one policy's decision totals since each node started,
// summed over the reachable nodes; the page turns them into rates.
type Policy struct {
	ID              string `json:"id"`
	Mode            string `json:"mode"`
	Allowed         uint64 `json:"allowed"`
	Denied          uint64 `json:"denied"`
	ShadowWouldDeny uint64 `json:"shadow_would_deny"`
	FailOpen        uint64 `json:"fail_open"`
	SoftOver        uint64 `json:"soft_over"`
	Throttled       uint64 `json:"throttled"`
}

// TopKey is one of the most denied keys; Key is already human-readable.
type TopKey struct {
	Policy string `json:"policy"`
	Key    string `json:"key"`
	Count  uint64 `json:"count"`
	Err    uint64 `json:"err"`
}

// Event is one check answered by its policy's fail-open mode.
type Event struct {
	Time      time.Time `json:"time"`
	Node      string    `json:"node"`
	Policy    string    `json:"policy"`
	RequestID string    `json:"request_id"`
	Reason    string    `json:"reason"`
	Key       string    `json:"key"`
}

// Source gives the overview; the node implements it (fanning out to peers).
type Source interface {
	Overview(ctx context.Context) (*Overview, error)
}
