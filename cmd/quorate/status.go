package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/rpc/quoratev1"
)

func (a *app) statusCmd() *cobra.Command {
	var (
		addr    string
		timeout time.Duration
		asJSON  bool
		creds   credFlags
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's nodes and shards as one node sees them",
		Long: `Show the cluster as the node at --addr sees it: the cluster record's epoch
and replication factor, every known node with its gossip state (alive,
suspect, dead) and its membership in the record (active, leaving, left,
removed; - for a node gossip knows but the record does not), the replica
moves in progress, and every shard that node hosts a replica of, with the
shard's leader, replicas, Raft term, applied index and when the node last
heard from the leader.

Exit status: 0 on success, 1 if the node could not be asked, 2 for bad flags.`,
		Example: `  quorate status --addr 127.0.0.1:7401`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usageError(fmt.Errorf("--timeout %v: must be positive", timeout))
			}
			c, err := creds.dial(addr)
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			resp, err := c.Status(ctx)
			if err != nil {
				return failure(rpcError(err, addr, timeout))
			}
			if asJSON {
				if err := printJSON(a.stdout, resp); err != nil {
					return failure(err)
				}
				return nil
			}
			printStatus(a.stdout, resp, time.Now())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&addr, "addr", "127.0.0.1:7401", "gRPC address of the node to ask")
	fl.DurationVar(&timeout, "timeout", 2*time.Second, "deadline of the call")
	fl.BoolVar(&asJSON, "json", false, "print the response as JSON (protojson)")
	creds.register(fl)
	return cmd
}

// printStatus writes resp as two tables, nodes then shards, with the replica
// moves in progress between them. Last contact is shown as an age at now, by
// this machine's clock.
func printStatus(w io.Writer, resp *quoratev1.StatusResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "answered by %s\n", orDash(resp.GetNodeId()))
	if resp.GetEpoch() != 0 || resp.GetReplicas() != 0 {
		fmt.Fprintf(tw, "cluster record: epoch %d, replication factor %d\n", resp.GetEpoch(), resp.GetReplicas())
	}
	fmt.Fprintf(tw, "policies: version %d, %d policies, %d emergency blocks\n", resp.GetPolicyVersion(), resp.GetPolicies(), resp.GetBlocks())
	if ur := resp.GetUnderReplicated(); len(ur) > 0 {
		ids := make([]string, len(ur))
		for i, s := range ur {
			ids[i] = strconv.Itoa(int(s))
		}
		fmt.Fprintf(tw, "under-replicated shards (a replica on a node that is not alive): %s\n", strings.Join(ids, ", "))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "NODE\tRPC\tHTTP\tSTATE\tMEMBERSHIP\n")
	for _, n := range resp.GetNodes() {
		state := strings.ToLower(strings.TrimPrefix(n.GetState().String(), "NODE_STATE_"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.GetId(), orDash(n.GetRpcAddr()), orDash(n.GetHttpAddr()), state, orDash(n.GetMembership()))
	}
	tw.Flush()

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

	fmt.Fprintln(w)
	if len(resp.GetShards()) == 0 {
		fmt.Fprintln(w, "no shards hosted on this node")
		return
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "SHARD\tLEADER\tREPLICAS\tTERM\tAPPLIED\tLAST CONTACT\n")
	for _, s := range resp.GetShards() {
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

// moveSteps says what a replica move does: "n4 joins, n1 leaves".
func moveSteps(m *quoratev1.MoveStatus) string {
	var steps []string
	if m.GetAdd() != "" {
		steps = append(steps, m.GetAdd()+" joins")
	}
	if m.GetRemove() != "" {
		steps = append(steps, m.GetRemove()+" leaves")
	}
	return orDash(strings.Join(steps, ", "))
}

func lastContact(s *quoratev1.ShardStatus, now time.Time) string {
	if s.GetLastContact() == nil {
		return "never"
	}
	age := now.Sub(s.GetLastContact().AsTime())
	if age < 0 {
		age = 0 // the node's clock is ahead of ours
	}
	return cliview.Duration(age) + " ago"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
