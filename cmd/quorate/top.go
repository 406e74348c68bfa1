package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/internal/cliview"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

func (a *app) topCmd() *cobra.Command {
	var (
		f      adminFlags
		req    pb.TopKeysRequest
		window time.Duration
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the most denied or the hottest keys per policy",
		Long: `Show each policy's most denied keys (--by denied: denials, and what a shadow
policy would have denied) or hottest keys (--by hits: every check, weighted by
cost) over a recent window, counted by every node and merged by the one at
--addr. A key is its policy's key descriptors' values joined with "/".

Each node counts in a bounded sketch, so a count may exceed the true one by at
most the ERROR shown (0 when exact); nodes that did not answer are named, and
their counts are missing.

Exit status: 0 on success, 1 if the cluster could not be asked, 2 for bad flags.`,
		Example: `  quorate top --policy plan_free --by denied
  quorate top --by hits --window 1m --limit 20`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case req.By != "denied" && req.By != "hits":
				return usageError(fmt.Errorf("--by %q: want denied or hits", req.By))
			case !slices.Contains([]time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour}, window):
				return usageError(fmt.Errorf("--window %v: want 1m, 5m, 15m or 1h", window))
			case limit < 1 || limit > 100:
				return usageError(fmt.Errorf("--limit %d: want 1 to 100", limit))
			}
			req.Window, req.Limit = durationpb.New(window), uint32(limit)
			var resp *pb.TopKeysResponse
			err := f.call(cmd.Context(), func(ctx context.Context, ac pb.AdminClient) (err error) {
				resp, err = ac.TopKeys(ctx, &req)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return cliview.TopJSON(a.stdout, resp)
			}
			cliview.Top(a.stdout, resp, req.GetBy())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Policy, "policy", "", "one policy's keys (default: every policy's)")
	fl.StringVar(&req.By, "by", "denied", "denied or hits")
	fl.DurationVar(&window, "window", 5*time.Minute, "1m, 5m, 15m or 1h")
	fl.IntVar(&limit, "limit", 10, "keys per policy (at most 100)")
	fl.BoolVar(&asJSON, "json", false, "print the answer as JSON")
	f.register(fl)
	return cmd
}
