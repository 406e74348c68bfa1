package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// maxBlock is the longest block a node accepts (admin.proto).
const maxBlock = 7 * 24 * time.Hour

func (a *app) blockCmd() *cobra.Command {
	var (
		f      adminFlags
		desc   []string
		dur    time.Duration
		reason string
	)
	cmd := &cobra.Command{
		Use:   "block --descriptor NAME=MATCHER... --for DURATION",
		Short: "Deny every request matching descriptors, cluster-wide, for a while",
		Long: `Add an emergency block: every check whose descriptors match is denied
(reason EMERGENCY_BLOCK) on every node until it expires or "quorate unblock".
Matchers are a policy scope's: a value, a prefix ending in *, a CIDR for ip.

Descriptor names: ` + strings.Join(matchNames(), ", ") + `, and custom.<name>.`,
		Example: `  quorate block --descriptor ip=203.0.113.8 --for 10m --reason "credential stuffing"
  quorate block --descriptor ip=198.51.100.0/24 --descriptor route=/v1/login --for 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := blockRequest(desc, dur, reason)
			if err != nil {
				return usageError(err)
			}
			var resp *pb.BlockResponse
			err = f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.Block(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "blocked: %s until %s (version %d)\n", resp.GetBlockId(),
				resp.GetExpiresAt().AsTime().UTC().Format(time.RFC3339), resp.GetVersion())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&desc, "descriptor", nil, "NAME=MATCHER, repeated; a request must match all of them")
	fl.DurationVar(&dur, "for", 0, "how long the block lasts, e.g. 10m (required, at most 168h)")
	fl.StringVar(&reason, "reason", "", "why, for the audit log and policy list")
	f.register(fl)
	_ = cmd.MarkFlagRequired("for")
	return cmd
}

// blockRequest checks the block's flags; the matchers are the node's to
// judge.
func blockRequest(kvs []string, d time.Duration, reason string) (*pb.BlockRequest, error) {
	if len(kvs) == 0 {
		return nil, errors.New("--descriptor: at least one NAME=MATCHER, e.g. ip=203.0.113.8")
	}
	if d <= 0 || d > maxBlock {
		return nil, fmt.Errorf("--for %v: want more than 0 and at most %v", d, maxBlock)
	}
	m := map[string]string{}
	for _, kv := range kvs {
		name, value, err := splitDescriptor(kv)
		if err != nil {
			return nil, err
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("--descriptor %s: given twice", name)
		}
		custom, isCustom := strings.CutPrefix(name, "custom.")
		if !slices.Contains(matchNames(), name) && !(isCustom && custom != "") {
			return nil, fmt.Errorf("--descriptor %s: unknown descriptor (known: %s, and custom.<name>)", name, strings.Join(matchNames(), ", "))
		}
		m[name] = value
	}
	return &pb.BlockRequest{Descriptors: m, Duration: durationpb.New(d), Reason: reason}, nil
}

func (a *app) unblockCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "unblock ID",
		Short: "Lift an emergency block before it expires",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var resp *pb.ApplyPoliciesResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.Unblock(ctx, &pb.UnblockRequest{BlockId: args[0]})
				return err
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "unblocked: %s (version %d)\n", args[0], resp.GetVersion())
			return nil
		},
	}
	f.register(cmd.Flags())
	return cmd
}
