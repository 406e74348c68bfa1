package cliview

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/quorate/quorate/localcluster"
	pb "github.com/quorate/quorate/rpc/quoratev1"
	"github.com/quorate/quorate/telemetry/decisionlog"
)

// What the cluster is doing: a node's status, the top keys, the decision
// log's lines, and the local cluster of quorate dev.

// Status writes a node's status: the cluster record and policy set, the
// nodes as a table, the splits and replica moves in progress, then the
// shards the node hosts as a table. Last contact is shown as an age at now,
// by this machine's clock.
func Status(w io.Writer, resp *pb.StatusResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	statusHeader(tw, resp)
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "NODE\tRPC\tHTTP\tSTATE\tMEMBERSHIP\n")
	for _, n := range resp.GetNodes() {
		state := strings.ToLower(strings.TrimPrefix(n.GetState().String(), "NODE_STATE_"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.GetId(), orDash(n.GetRpcAddr()), orDash(n.GetHttpAddr()), state, orDash(n.GetMembership()))
	}
	tw.Flush()
	statusChanges(w, resp)
	fmt.Fprintln(w)
	statusShards(w, resp.GetShards(), now)
}

// statusHeader is who answered, the cluster record, the policy set and the
// shards short of replicas.
func statusHeader(w io.Writer, resp *pb.StatusResponse) {
	fmt.Fprintf(w, "answered by %s\n", orDash(resp.GetNodeId()))
	if resp.GetEpoch() != 0 || resp.GetReplicas() != 0 {
		fmt.Fprintf(w, "cluster record: epoch %d, replication factor %d\n", resp.GetEpoch(), resp.GetReplicas())
	}
	fmt.Fprintf(w, "policies: version %d, %d policies, %d emergency blocks\n", resp.GetPolicyVersion(), resp.GetPolicies(), resp.GetBlocks())
	if ur := resp.GetUnderReplicated(); len(ur) > 0 {
		ids := make([]string, len(ur))
		for i, s := range ur {
			ids[i] = strconv.Itoa(int(s))
		}
		fmt.Fprintf(w, "under-replicated shards (a replica on a node that is not alive): %s\n", strings.Join(ids, ", "))
	}
}

// statusChanges is the splits in progress, the shard ranges after them and
// the replica moves in progress, each only if there are any.
func statusChanges(w io.Writer, resp *pb.StatusResponse) {
	if sps := resp.GetSplits(); len(sps) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "splits in progress:")
		for _, sp := range sps {
			fmt.Fprintf(w, "  shard %d into %d: shard %d takes the hashes from %#016x up\n", sp.GetParent(), sp.GetChild(), sp.GetChild(), sp.GetAt())
		}
	}
	if rs := resp.GetRanges(); len(rs) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "shard ranges (%d shards, after splits):\n", resp.GetShardCount())
		for _, r := range rs {
			fmt.Fprintf(w, "  shard %d: %#016x-%#016x\n", r.GetShard(), r.GetLo(), r.GetHi())
		}
	}
	if moves := resp.GetMoves(); len(moves) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "moves in progress:")
		for _, m := range moves {
			fmt.Fprintf(w, "  shard %d: %s\n", m.GetShard(), moveSteps(m))
		}
	}
}

// statusShards is the table of the shards hosted, or says there are none.
func statusShards(w io.Writer, shards []*pb.ShardStatus, now time.Time) {
	if len(shards) == 0 {
		fmt.Fprintln(w, "no shards hosted on this node")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SHARD\tLEADER\tREPLICAS\tTERM\tAPPLIED\tLAST CONTACT\n")
	for _, s := range shards {
		leader := s.GetLeaderId()
		if leader == "" {
			leader = "(none)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\n", s.GetId(), leader,
			orDash(strings.Join(s.GetReplicas(), ",")), s.GetTerm(), s.GetAppliedIndex(),
			lastContact(s, now))
	}
	tw.Flush()
}

// StatusJSON writes a node's status as indented protojson, every field
// included.
func StatusJSON(w io.Writer, resp *pb.StatusResponse) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// moveSteps says what a replica move does: "n4 joins, n1 leaves".
func moveSteps(m *pb.MoveStatus) string {
	var steps []string
	if m.GetAdd() != "" {
		steps = append(steps, m.GetAdd()+" joins")
	}
	if m.GetRemove() != "" {
		steps = append(steps, m.GetRemove()+" leaves")
	}
	return orDash(strings.Join(steps, ", "))
}

// lastContact is when the node last heard from the shard's leader, as an
// age at now.
func lastContact(s *pb.ShardStatus, now time.Time) string {
	if s.GetLastContact() == nil {
		return "never"
	}
	age := now.Sub(s.GetLastContact().AsTime())
	if age < 0 {
		age = 0 // the node's clock is ahead of ours
	}
	return Duration(age) + " ago"
}

// Top writes the top keys as a table, counts under DENIED or HITS as by
// says, then the nodes that did not answer.
func Top(w io.Writer, resp *pb.TopKeysResponse, by string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	col := "DENIED"
	if by == "hits" {
		col = "HITS"
	}
	fmt.Fprintf(tw, "POLICY\tKEY\t%s\tERROR\n", col)
	for _, k := range resp.GetKeys() {
		fmt.Fprintf(tw, "%s\t%s\t%d\t±%d\n", k.GetPolicy(), orDash(k.GetKey()), k.GetCount(), k.GetError())
	}
	_ = tw.Flush()
	if len(resp.GetKeys()) == 0 {
		fmt.Fprintln(w, "(no keys in the window)")
	}
	for _, n := range resp.GetUnreachable() {
		fmt.Fprintf(w, "node %s did not answer: its counts are missing\n", n)
	}
}

// TopJSON writes the top keys as plain JSON: numbers as numbers, the
// HTTP API's names (GET /v1/admin/top).
func TopJSON(w io.Writer, resp *pb.TopKeysResponse) error {
	type key struct {
		Policy string `json:"policy"`
		Key    string `json:"key"`
		Count  uint64 `json:"count"`
		Error  uint64 `json:"error"`
	}
	out := struct {
		Keys        []key    `json:"keys"`
		Unreachable []string `json:"unreachable"`
	}{Keys: []key{}, Unreachable: append([]string{}, resp.GetUnreachable()...)}
	for _, k := range resp.GetKeys() {
		out.Keys = append(out.Keys, key{k.GetPolicy(), k.GetKey(), k.GetCount(), k.GetError()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// A DevCluster is quorate dev's cluster once it is ready, as DevReady shows
// it.
type DevCluster struct {
	Nodes []localcluster.Node
	PIDs  []int  // the nodes' processes, in the order of Nodes
	Self  string // how the user runs quorate, for the commands shown
	// Credentials is the directory of the cluster's credentials; Env, the
	// shell lines that export what other tools need of them.
	Credentials, Env string
	// ReadToken is the prometheus (read) token, kept in ReadTokenFile.
	ReadToken, ReadTokenFile string
	PID                      int // dev's own process
}

// DevReady writes what quorate dev says once its cluster is ready: the
// node table, the commands to try, the status page, the credentials and
// how to drive dev.
func DevReady(w io.Writer, d DevCluster) {
	fmt.Fprintf(w, "\nquorate dev: %d nodes ready\n\n", len(d.Nodes))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tRPC\tHTTP\tGOSSIP\tPEER\tPID\tDATA\n")
	for i, n := range d.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.ID, n.RPC, n.HTTP, n.Gossip, n.Peer, d.PIDs[i], n.Data)
	}
	tw.Flush()
	fmt.Fprintf(w, `
Try:
  %[6]s check --addr %[1]s --name api --key user:42 --algorithm token_bucket --limit 100 --period 1m
  %[6]s status --addr %[1]s
  %[6]s top --addr %[1]s
  %[6]s tail --addr %[1]s --decision DENY

Status page (it keeps the read token in a cookie):
  http://%[5]s/ui/?token=%[8]s

Credentials are in %[2]s; quorate check, status and bench find them
when run from the directory holding --data. Elsewhere, and for other tools:
%[3]s
  grpcurl -cacert "$QUORATE_CA" -H "authorization: Bearer $QUORATE_TOKEN" %[1]s list
  curl -H "Authorization: Bearer $(cat %[4]s)" http://%[5]s/metrics

Ctrl-C stops the cluster. A node killed meanwhile (kill -9 <pid>) is
reported and the others keep running. Type "restart n2" here to bring a
node back on its data (or send SIGUSR1 to dev, pid %[7]d, to start every
node that is not running); "help" lists the other commands.

`, d.Nodes[0].RPC, d.Credentials, d.Env, d.ReadTokenFile, d.Nodes[0].HTTP, d.Self, d.PID, d.ReadToken)
}

// A Tail writes the decision log's lines as the nodes send them, one whole
// line at a time: as they are (JSON) or as DecisionLine shows them. Once it
// has written Max lines (0: no limit) it writes no more of them and calls
// Done.
type Tail struct {
	W    io.Writer
	JSON bool
	Max  int
	Done func()

	mu sync.Mutex
	n  int // lines written
}

// Line writes one line of the log, a record in its JSON.
func (t *Tail) Line(line []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.Max > 0 && t.n >= t.Max {
		return
	}
	t.n++
	if t.JSON {
		_, _ = t.W.Write(line)
	} else {
		fmt.Fprintln(t.W, DecisionLine(line))
	}
	if t.Max > 0 && t.n >= t.Max {
		t.Done()
	}
}

// Lost says that n lines of the node at addr were lost: the tail fell
// behind.
func (t *Tail) Lost(addr string, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.W, "(%s: %d lines lost: this tail fell behind)\n", addr, n)
}

// DecisionLine is one line of the decision log (its JSON) as a person
// reads it: time, node, decision, reason, then the fields that are set. A
// line that does not parse is shown as it came, trimmed.
func DecisionLine(line []byte) string {
	var r decisionlog.Record
	if err := json.Unmarshal(line, &r); err != nil {
		return strings.TrimSpace(string(line))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-4s %-5s %-18s", r.Time.Local().Format("15:04:05.000"), r.Node, r.Decision, r.Reason)
	delay := ""
	if r.DelayMs > 0 {
		delay = fmt.Sprintf("%dms", r.DelayMs)
	}
	for _, kv := range [][2]string{{"delay", delay}, {"policy", r.Policy}, {"tenant", r.Descriptors.TenantID}, {"key", r.Descriptors.APIKeyID},
		{"route", r.Descriptors.Route}, {"ip", r.Descriptors.IP}, {"mode", r.Mode}, {"request_id", r.RequestID}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, " %s=%s", kv[0], kv[1])
		}
	}
	if r.SampleRate > 0 && r.SampleRate < 1 {
		fmt.Fprintf(&b, " (1 in %.0f allows)", 1/r.SampleRate)
	}
	return b.String()
}
