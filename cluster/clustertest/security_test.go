package clustertest_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/fsm"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/ring"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/security"
)

// peerConn dials addr with creds, for calling the internal services as an
// attacker (or, with a node's certificate, as a peer) would.
func peerConn(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func caPool(t *testing.T, c *clustertest.Cluster) *x509.CertPool {
	t.Helper()
	pool, err := security.LoadCA(c.Creds.CA())
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// keyPair writes p to dir and loads it.
func keyPair(t *testing.T, p security.PEM, name string) tls.Certificate {
	t.Helper()
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := p.Write(cf, kf); err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(cf, kf)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// resetForward is the forged Forward of the issue's finding 1: an OpReset
// of an exhausted bucket.
func resetForward(name, key string, shards int) *pb.ForwardRequest {
	bk := ring.BucketKey(name, key)
	r, _ := ring.New(shards)
	cmd := fsm.AppendCommand(nil, &fsm.Command{Ops: []fsm.Op{{Kind: fsm.OpReset, Key: bk}}})
	return &pb.ForwardRequest{Batches: []*pb.ShardBatch{{Shard: uint32(r.ShardFor(bk)), Command: cmd}}}
}

// TestSecurity runs the security tests that need a whole cluster on one
// (with --pprof): starting a cluster is what costs.
func TestSecurity(t *testing.T) {
	const shards = 3
	// No deny cache: the forged reset changes a bucket behind the nodes'
	// backs, and the checks that show whether it did must reach the shard,
	// not a node's memory of the bucket's last denial.
	c := clustertest.Start(t, 3, clustertest.Options{Shards: shards, ExtraArgs: []string{"--pprof", "--deny-cache=0"}})
	t.Run("tokens", func(t *testing.T) { testTokens(t, c) })
	t.Run("peer port only for nodes", func(t *testing.T) { testPeerPortOnlyForNodes(t, c, shards) })
	t.Run("gossip wrong key", func(t *testing.T) { testGossipWrongKey(t, c) })
	t.Run("gossip key rotation", func(t *testing.T) { testGossipKeyRotation(t, c) })
	t.Run("cert reload", func(t *testing.T) { testCertReload(t, c) }) // last: it changes n1's certificate
}

// testPeerPortOnlyForNodes: the internal services answer only callers with
// a node certificate of the cluster's CA, and are not served on the public
// port at all. A forged reset of an exhausted key is refused from every
// other caller; from a real node certificate (the control) it goes through,
// which shows what the refusals protect.
func testPeerPortOnlyForNodes(t *testing.T, c *clustertest.Cluster, shards int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	item := clustertest.Item("sec", "victim", 1, time.Hour)
	check := func() pb.Decision {
		t.Helper()
		resp, err := c.Client(0).Check(ctx, &pb.CheckRequest{Items: []*pb.Item{item}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetDecision()
	}
	if d := check(); d != pb.Decision_DECISION_ALLOW {
		t.Fatalf("first check: %v", d)
	}
	if d := check(); d != pb.Decision_DECISION_DENY {
		t.Fatalf("second check of a limit of 1: %v", d)
	}
	r, _ := ring.New(shards)
	shard := r.ShardFor(ring.BucketKey(item.GetName(), item.GetKey()))
	leader := -1
	for leader < 0 && ctx.Err() == nil {
		leader = c.ShardLeader(0, shard)
	}
	target := c.Nodes[leader].Peer
	forged := resetForward(item.GetName(), item.GetKey(), shards)

	pool := caPool(t, c)
	ca, err := security.LoadCAKey(c.Creds.CA(), c.Creds.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	clientPEM, err := ca.IssueClient("mallory", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, otherCA, err := security.NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := security.LoadCAKey(writePEM(t, otherCA))
	foreignNode, err := other.IssueNode("n1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	attackers := []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"plaintext", insecure.NewCredentials()},
		{"TLS without a client certificate", credentials.NewTLS(&tls.Config{RootCAs: pool})},
		{"a client certificate of the cluster's CA", credentials.NewTLS(&tls.Config{RootCAs: pool,
			Certificates: []tls.Certificate{keyPair(t, clientPEM, "mallory")}})},
		{"a node certificate of another CA", credentials.NewTLS(&tls.Config{RootCAs: pool,
			Certificates: []tls.Certificate{keyPair(t, foreignNode, "n1")}})},
	}
	for _, a := range attackers {
		conn := peerConn(t, target, a.creds)
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		_, ferr := pb.NewInternalClient(conn).Forward(cctx, forged)
		raft := pb.NewRaftTransportClient(conn)
		_, aerr := raft.AppendEntries(cctx, &pb.AppendEntriesRequest{Group: "shard-0", Header: &pb.RaftHeader{Id: []byte("mallory")}, Term: 1 << 40})
		_, terr := raft.TimeoutNow(cctx, &pb.TimeoutNowRequest{Group: "shard-0", Header: &pb.RaftHeader{Id: []byte("mallory")}})
		ccancel()
		for call, err := range map[string]error{"Forward": ferr, "AppendEntries": aerr, "TimeoutNow": terr} {
			if status.Code(err) != codes.Unavailable {
				t.Errorf("%s: %s on the peer port = %v; want the handshake refused (Unavailable)", a.name, call, err)
			}
		}
	}
	if d := check(); d != pb.Decision_DECISION_DENY {
		t.Fatalf("after the refused forgeries the exhausted key answers %v", d)
	}

	// The public port serves neither service, even to the operator token.
	pub := c.Client(leader).Conn()
	if _, err := pb.NewInternalClient(pub).Forward(ctx, forged); status.Code(err) != codes.Unimplemented {
		t.Errorf("Forward on the public port = %v; want Unimplemented", err)
	}
	if _, err := pb.NewRaftTransportClient(pub).TimeoutNow(ctx, &pb.TimeoutNowRequest{Group: "shard-0"}); status.Code(err) != codes.Unimplemented {
		t.Errorf("TimeoutNow on the public port = %v; want Unimplemented", err)
	}

	// Control: with a node's certificate the same reset is applied.
	node, err := tls.LoadX509KeyPair(c.Creds.NodeCert("n2"), c.Creds.NodeKey("n2"))
	if err != nil {
		t.Fatal(err)
	}
	conn := peerConn(t, target, credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{node}}))
	// A node speaks to Raft for itself only: n2's certificate cannot carry
	// a message from n1 (or mallory), while its own stale-term message is
	// answered by raft (and refused there, harmlessly).
	raft := pb.NewRaftTransportClient(conn)
	for _, who := range []string{"n1", "mallory"} {
		_, err := raft.AppendEntries(ctx, &pb.AppendEntriesRequest{Group: "shard-0", Header: &pb.RaftHeader{Id: []byte(who), ProtocolVersion: 3}, Term: 1 << 40})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("AppendEntries from n2's certificate claiming %s = %v; want PermissionDenied", who, err)
		}
	}
	if _, err := raft.AppendEntries(ctx, &pb.AppendEntriesRequest{Group: "shard-0", Header: &pb.RaftHeader{Id: []byte("n2"), ProtocolVersion: 3}}); err != nil {
		t.Errorf("AppendEntries from n2's certificate as n2: %v", err)
	}
	// A node certificate is not an operator: on the peer port the Admin
	// service answers Status alone, never a policy change.
	peerAdmin := pb.NewAdminClient(conn)
	if _, err := peerAdmin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: "policies: []", Prune: true}); status.Code(err) != codes.Unimplemented {
		t.Errorf("ApplyPolicies on the peer port with a node certificate = %v; want Unimplemented", err)
	}
	if _, err := peerAdmin.Status(ctx, &pb.StatusRequest{}); err != nil {
		t.Errorf("Status on the peer port with a node certificate: %v", err)
	}
	resp, err := pb.NewInternalClient(conn).Forward(ctx, forged)
	if err != nil || resp.GetReplies()[0].GetError() != pb.ForwardError_FORWARD_ERROR_NONE {
		t.Fatalf("Forward with a node certificate: %v %v", resp, err)
	}
	if d := check(); d != pb.Decision_DECISION_ALLOW {
		t.Fatalf("after a node's reset the key answers %v; want ALLOW (the control must show the forgery works when authenticated)", d)
	}
}

func writePEM(t *testing.T, p security.PEM) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cf, kf := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := p.Write(cf, kf); err != nil {
		t.Fatal(err)
	}
	return cf, kf
}

// servedSerial is the serial of the certificate addr presents.
func servedSerial(t *testing.T, addr string, pool *x509.CertPool) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// testCertReload: a node given a new certificate and SIGHUP presents it on
// its next connections, without a restart, and the cluster keeps deciding
// (its peers accept the new certificate).
func testCertReload(t *testing.T, c *clustertest.Cluster) {
	pool := caPool(t, c)
	before := servedSerial(t, c.Nodes[0].RPC, pool)
	ca, err := security.LoadCAKey(c.Creds.CA(), c.Creds.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.IssueNode("n1", []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(c.Creds.NodeCert("n1"), c.Creds.NodeKey("n1")); err != nil {
		t.Fatal(err)
	}
	pid := c.PID(0)
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	after := before
	await.Until(t, 10*time.Second, func() error {
		if after = servedSerial(t, c.Nodes[0].RPC, pool); after == before {
			return fmt.Errorf("n1 still presents serial %s after SIGHUP; log:\n%s", before, c.Log(0))
		}
		return nil
	})
	if !c.Running(0) || c.PID(0) != pid {
		t.Fatal("n1 restarted")
	}
	if got := servedSerial(t, c.Nodes[0].Peer, pool); got != after {
		t.Errorf("peer port presents %s, public port %s", got, after)
	}
	// The peers take n1's new certificate: checks decided on every shard,
	// n1 forwarding to the others and leading its own.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 30 {
		it := clustertest.Item("reload", "k"+string(rune('a'+i)), 10, time.Minute)
		if resp, err := c.Client(0).Check(ctx, &pb.CheckRequest{Items: []*pb.Item{it}}); err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
			t.Fatalf("check %d after the reload: %v %v", i, resp, err)
		}
	}
}

// testTokens: a cluster with a tokens file serves each surface to the
// scopes it needs and nothing to callers without a token; /debug/pprof is
// served (with --pprof) to admin tokens only, and each use is logged with
// the token's name.
func testTokens(t *testing.T, c *clustertest.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &pb.CheckRequest{Items: []*pb.Item{clustertest.Item("tok", "k", 100, time.Minute)}}
	ca, err := client.WithCAFile(c.Creds.CA())
	if err != nil {
		t.Fatal(err)
	}
	dial := func(opts ...grpc.DialOption) *client.Client {
		cl, err := client.Dial(c.Nodes[0].RPC, append([]grpc.DialOption{ca}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	none, wrong, prom, app := dial(), dial(client.WithToken("qrt_not-a-token")), dial(client.WithToken(c.Token("prometheus"))), dial(client.WithToken(c.Token("app")))
	for _, tt := range []struct {
		name string
		cl   *client.Client
		want codes.Code
	}{
		{"no token", none, codes.Unauthenticated},
		{"unknown token", wrong, codes.Unauthenticated},
		{"read token", prom, codes.PermissionDenied},
		{"check token", app, codes.OK},
	} {
		if _, err := tt.cl.Check(ctx, req); status.Code(err) != tt.want {
			t.Errorf("Check with %s = %v; want %v", tt.name, err, tt.want)
		}
	}
	leased := &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: []*pb.Item{clustertest.Item("tok", "leased", 100, time.Minute)}}
	if resp, err := app.Check(ctx, leased); err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
		t.Errorf("leased check with a check token: %v %v", resp, err)
	}
	if _, err := none.Status(ctx); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Status without a token = %v; want Unauthenticated", err)
	}
	for _, cl := range []*client.Client{prom, app} {
		if _, err := cl.Status(ctx); err != nil {
			t.Errorf("Status with a read or check token: %v", err)
		}
	}
	// The routed client learns the topology with a check token alone.
	rc, err := client.DialCluster(ctx, []string{c.Nodes[1].RPC}, client.WithDialOptions(c.DialOptions("app")...))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Check(ctx, req); err != nil || rc.Topology().Shards != 3 {
		t.Errorf("routed check with a check token: %v, topology %+v", err, rc.Topology())
	}
	if err := none.Health(ctx); err != nil {
		t.Errorf("health without a token: %v", err)
	}

	for _, tt := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", c.Token("app"), http.StatusForbidden},
		{"/metrics", c.Token("prometheus"), http.StatusOK},
		{"/debug/pprof/", "", http.StatusUnauthorized},
		{"/debug/pprof/", c.Token("prometheus"), http.StatusForbidden},
		{"/debug/pprof/", c.Token("operator"), http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/healthz", "", http.StatusOK},
	} {
		if got := httpStatus(t, "http://"+c.Nodes[0].HTTP+tt.path, tt.token); got != tt.want {
			t.Errorf("GET %s with token %.8q: %d; want %d", tt.path, tt.token, got, tt.want)
		}
	}
	if log := c.Log(0); !strings.Contains(log, `msg="audit: admin action" node=n1 token=operator action="GET /debug/pprof/"`) {
		t.Errorf("no audit line for the operator's pprof request; log:\n%s", log)
	}
}

func httpStatus(t *testing.T, url, token string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestNoTokensFile: without a tokens file, checks and Status are served to
// loopback callers without a token, and metrics to no one.
func TestNoTokensFile(t *testing.T) {
	c := clustertest.Start(t, 1, clustertest.Options{Shards: 1, ExtraArgs: []string{"--tokens-file", ""}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca, err := client.WithCAFile(c.Creds.CA())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.Dial(c.Nodes[0].RPC, ca)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Check(ctx, &pb.CheckRequest{Items: []*pb.Item{clustertest.Item("open", "k", 10, time.Minute)}})
	if err != nil || resp.GetDecision() != pb.Decision_DECISION_ALLOW {
		t.Fatalf("loopback check without a tokens file: %v %v", resp, err)
	}
	if _, err := cl.Status(ctx); err != nil {
		t.Errorf("loopback Status without a tokens file: %v", err)
	}
	if got := httpStatus(t, "http://"+c.Nodes[0].HTTP+"/metrics", c.Token("operator")); got != http.StatusUnauthorized {
		t.Errorf("/metrics without a tokens file: %d; want 401", got)
	}
}

// testGossipWrongKey: a node whose gossip key differs is refused, and both
// sides say why in their logs.
func testGossipWrongKey(t *testing.T, c *clustertest.Cluster) {
	intruder := c.StartExtra(t, "n4", append(extraCreds(t, c, "n4"), "--gossip-key", security.NewGossipKey(), "--join", c.Nodes[0].Gossip))
	// Both logs are checked one by one below.
	_ = await.Wait(20*time.Second, func() error {
		if strings.Contains(intruder.Log(), "the seeds refuse this node: their gossip keyring differs") &&
			strings.Contains(c.Log(0), "refused a message that this node's gossip keyring cannot decrypt") {
			return nil
		}
		return errors.New("not both said")
	})
	if !strings.Contains(intruder.Log(), "the seeds refuse this node: their gossip keyring differs") {
		t.Errorf("the node with the wrong key does not say why it cannot join:\n%s", intruder.Log())
	}
	if !strings.Contains(c.Log(0), "refused a message that this node's gossip keyring cannot decrypt") {
		t.Errorf("the seed does not say it refused a foreign key:\n%s", c.Log(0))
	}
	if isMember(t, c, "n4") {
		t.Error("the node with the wrong key is a member")
	}
}

// extraCreds are the TLS flags of one more node, id, of c's CA.
func extraCreds(t *testing.T, c *clustertest.Cluster, id string) []string {
	t.Helper()
	ca, err := security.LoadCAKey(c.Creds.CA(), c.Creds.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.IssueNode(id, []string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, id+".crt"), filepath.Join(dir, id+".key")
	if err := p.Write(cert, key); err != nil {
		t.Fatal(err)
	}
	return []string{"--tls-cert", cert, "--tls-key", key, "--tls-ca", c.Creds.CA()}
}

// isMember reports whether n1's gossip counts id alive.
func isMember(t *testing.T, c *clustertest.Cluster, id string) bool {
	t.Helper()
	st, err := c.Client(0).Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range st.GetNodes() {
		if n.GetId() == id && n.GetState() == pb.NodeState_NODE_STATE_ALIVE {
			return true
		}
	}
	return false
}

// testGossipKeyRotation rotates the cluster's gossip key the way the README
// says, with SIGHUP and no restart: the new key added as secondary, made
// primary, the old one removed. Then a node with only the new key joins,
// and one with only the old key is refused.
func testGossipKeyRotation(t *testing.T, c *clustertest.Cluster) {
	old, err := os.ReadFile(c.Creds.Keyring())
	if err != nil {
		t.Fatal(err)
	}
	oldKey, newKey := strings.TrimSpace(string(old)), security.NewGossipKey()
	for _, ring := range [][]string{{oldKey, newKey}, {newKey, oldKey}, {newKey}} {
		if err := os.WriteFile(c.Creds.Keyring(), []byte(strings.Join(ring, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		reloads := make([]int, len(c.Nodes))
		for i := range c.Nodes {
			reloads[i] = strings.Count(c.Log(i), "credentials reloaded")
			if err := syscall.Kill(c.PID(i), syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		for i := range c.Nodes {
			waitLog(t, c, i, reloads[i]+1)
		}
	}
	stale := c.StartExtra(t, "n5", append(extraCreds(t, c, "n5"), "--gossip-key", oldKey, "--join", c.Nodes[1].Gossip))
	fresh := c.StartExtra(t, "n6", append(extraCreds(t, c, "n6"), "--gossip-key", newKey, "--join", c.Nodes[1].Gossip))
	_ = await.Wait(20*time.Second, func() error {
		if !isMember(t, c, "n6") {
			return errors.New("n6 is no member")
		}
		return nil
	})
	if !isMember(t, c, "n6") {
		t.Errorf("a node with the new key did not join; its log:\n%s", fresh.Log())
	}
	if isMember(t, c, "n5") || !strings.Contains(stale.Log(), "their gossip keyring differs") {
		t.Errorf("a node with the removed key was not refused; its log:\n%s", stale.Log())
	}
}

// waitLog waits until node i has logged "credentials reloaded" n times.
func waitLog(t *testing.T, c *clustertest.Cluster, i, n int) {
	t.Helper()
	await.Until(t, 10*time.Second, func() error {
		if strings.Count(c.Log(i), "credentials reloaded") < n {
			return fmt.Errorf("%s did not reload its credentials; log:\n%s", c.Nodes[i].ID, c.Log(i))
		}
		return nil
	})
}
