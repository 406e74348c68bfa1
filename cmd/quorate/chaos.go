package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/chaos"
)

func (a *app) chaosCmd() *cobra.Command {
	var (
		cfg  chaos.Config
		seed int64
	)
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run a cluster under injected faults and check what it decided",
		Long: `Start a cluster of real agents, each on its own loopback address, run
strict and leased checks against it for --duration while a nemesis kills,
pauses, partitions (nftables, needs root) and skews the clocks of nodes on a
schedule decided by --seed; then kill and restart the whole cluster and check
linearizability, admission, availability and durability.

The report (report.txt, report.json, visualizations of failing keys, the
agents' logs and data) goes to --out. On any violation the command exits 1
and prints the command that replays the same schedule. The last line printed
is a one-line summary.`,
		Example: `  quorate chaos --duration 10m --seed 42`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.chaosFlags(cmd, &cfg, seed); err != nil {
				return usageError(err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg.Progress = a.stderr
			rep, err := chaos.Run(ctx, cfg)
			if err != nil {
				return failure(fmt.Errorf("%w (seed %d)", err, cfg.Seed))
			}
			fmt.Fprintf(a.stdout, "report: %s\n", filepath.Join(cfg.Out, "report.txt"))
			if !rep.OK() {
				for _, v := range rep.Violations {
					fmt.Fprintf(a.stdout, "violation: %s\n", v)
				}
				fmt.Fprintf(a.stdout, "replay with seed %d: %s\n", cfg.Seed, rep.Replay)
				fmt.Fprintln(a.stdout, rep.Summary())
				return failure(nil)
			}
			fmt.Fprintln(a.stdout, rep.Summary())
			return nil
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the workload runs under faults")
	fl.Int64Var(&seed, "seed", 0, "seed of the fault schedule and the clients (default: from the time, printed)")
	fl.IntVar(&cfg.Nodes, "nodes", 3, "number of agents: 3 or 5")
	fl.StringVar(&cfg.Out, "out", "", "results folder (default chaos/results/<UTC time>)")
	fl.DurationVar(&cfg.FaultInterval, "fault-interval", 5*time.Second, "mean quiet time between faults")
	fl.StringVar(&cfg.Binary, "binary", "", "quorate executable the agents run (default: this one)")
	fl.DurationVar(&cfg.CheckTimeout, "check-timeout", 5*time.Minute, "bound of each key's linearizability search (a search cut short is reported as unknown, not as a pass)")
	return cmd
}

// chaosFlags fills in the defaults that depend on the environment.
func (a *app) chaosFlags(cmd *cobra.Command, cfg *chaos.Config, seed int64) error {
	switch {
	case cmd.Flags().Changed("seed") && seed < 0:
		return fmt.Errorf("--seed %d: must not be negative", seed)
	case cmd.Flags().Changed("seed"):
		cfg.Seed = uint64(seed)
	default:
		cfg.Seed = uint64(time.Now().UnixNano() % 1e9)
		fmt.Fprintf(a.stderr, "chaos: --seed %d (from the time)\n", cfg.Seed)
	}
	if cfg.Out == "" {
		cfg.Out = filepath.Join("chaos", "results", time.Now().UTC().Format("20060102-150405"))
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return errors.New("--binary: cannot find this executable; name one")
		}
		cfg.Binary = exe
	}
	if cfg.CheckTimeout <= 0 {
		return fmt.Errorf("--check-timeout %s: must be positive", cfg.CheckTimeout)
	}
	return cfg.Validate()
}
