package localcluster

import (
	"reflect"
	"testing"
)

func TestArgs(t *testing.T) {
	l := Layout{Shards: 8, LogLevel: "warn", Credentials: "/c", Extra: []string{"--lease-ttl", "30s", "--decision-log=file:{data}/{node}.jsonl"}}
	for _, id := range []string{"n1", "n2", "n3"} {
		l.Nodes = append(l.Nodes, Node{ID: id, Data: "/d/" + id, RPC: id + ":1", HTTP: id + ":2", Gossip: id + ":3", Peer: id + ":4"})
	}
	want := []string{"agent", "--node-id", "n2", "--data", "/d/n2", "--rpc", "n2:1", "--peer", "n2:4", "--http", "n2:2", "--gossip", "n2:3",
		"--bootstrap-expect", "3", "--replicas", "3", "--shards", "8", "--log-level", "warn",
		"--join", "n1:3,n3:3",
		"--tls-cert", "/c/n2.crt", "--tls-key", "/c/n2.key", "--tls-ca", "/c/ca.crt",
		"--tokens-file", "/c/tokens", "--gossip-keyring", "/c/gossip.keyring",
		"--lease-ttl", "30s", "--decision-log=file:/d/n2/n2.jsonl"}
	if got := l.Args(1); !reflect.DeepEqual(got, want) {
		t.Errorf("Args(1) =\n%q\nwant\n%q", got, want)
	}
	// One node: no --join, one replica, the agent's defaults kept.
	one := Layout{Nodes: l.Nodes[:1]}
	want = []string{"agent", "--node-id", "n1", "--data", "/d/n1", "--rpc", "n1:1", "--peer", "n1:4", "--http", "n1:2", "--gossip", "n1:3",
		"--bootstrap-expect", "1", "--replicas", "1"}
	if got := one.Args(0); !reflect.DeepEqual(got, want) {
		t.Errorf("one node: %q", got)
	}
}

// A node that joins later gets every bootstrap node's gossip address and
// the cluster's replica count, and no --bootstrap-expect.
func TestJoinArgs(t *testing.T) {
	l := Layout{Shards: 8, LogLevel: "warn", Extra: []string{"--lease-ttl", "30s"}}
	for _, id := range []string{"n1", "n2"} {
		l.Nodes = append(l.Nodes, Node{ID: id, Data: "/d/" + id, RPC: id + ":1", HTTP: id + ":2", Gossip: id + ":3", Peer: id + ":4"})
	}
	want := []string{"agent", "--node-id", "n3", "--data", "/d/n3", "--rpc", "n3:1", "--peer", "n3:4", "--http", "n3:2", "--gossip", "n3:3",
		"--replicas", "2", "--shards", "8", "--log-level", "warn", "--join", "n1:3,n2:3", "--lease-ttl", "30s"}
	n3 := Node{ID: "n3", Data: "/d/n3", RPC: "n3:1", HTTP: "n3:2", Gossip: "n3:3", Peer: "n3:4"}
	if got := l.JoinArgs(n3); !reflect.DeepEqual(got, want) {
		t.Errorf("JoinArgs =\n%q\nwant\n%q", got, want)
	}
}
