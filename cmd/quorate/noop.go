package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/bench/noopserver"
)

// noopServerCmd is the no-op baseline of quorate bench --baseline noop:
// hidden, because only the bench starts it.
func (a *app) noopServerCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:    "noop-server",
		Short:  "Serve the RateLimiter API allowing every check, as quorate bench's no-op baseline",
		Hidden: true,
		Long: `Serve quorate's RateLimiter API (Check and CheckStream) on --addr, answering
every check ALLOW with one result per item and doing nothing else, until
SIGINT or SIGTERM. It prints "noop-server listening on <host:port>" once it
accepts connections. quorate bench --baseline noop starts and stops it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := noopserver.Serve(ctx, addr, a.stdout); err != nil {
				return failure(err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "gRPC address, host:port (port 0: a free one)")
	return cmd
}
