package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/quorate/quorate/cluster"
	"github.com/quorate/quorate/internal/cliview"
)

// Exit statuses of the binary.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed; check: the request was denied
	exitUsage   = 2 // bad flags or arguments; check: any error
)

// app is what the commands need from the outside world, so tests can run
// them without a terminal or a cluster.
type app struct {
	stdout, stderr io.Writer
	// stdin is what quorate dev reads commands from; nil reads nothing.
	stdin io.Reader
	// runNode runs one node until its context is cancelled: cluster.Run,
	// except in tests.
	runNode func(context.Context, cluster.Config) error
}

func newApp() *app {
	return &app{stdout: os.Stdout, stderr: os.Stderr, stdin: os.Stdin, runNode: cluster.Run}
}

// exitError is a command's failure and the exit status it calls for.
type exitError struct {
	code int
	// err is printed to stderr; nil exits silently (the command has already
	// said what happened, as check does for a denial).
	err error
	// usage adds a pointer to the command's --help.
	usage bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is a mistake in the command line: exit status 2.
func usageError(err error) error {
	return &exitError{code: exitUsage, err: err, usage: true}
}

// failure is a command that ran and failed: exit status 1.
func failure(err error) error {
	return &exitError{code: exitFailure, err: err}
}

// viewError is a view's error as a command's: what the node sent that could
// not be shown is a failure; the writer's errors are returned as they are.
func viewError(err error) error {
	if _, ok := errors.AsType[*cliview.AnswerError](err); ok {
		return failure(err)
	}
	return err
}

// run executes the command line args and returns the process exit status.
func (a *app) run(ctx context.Context, args []string) int {
	root := a.rootCmd()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Commands return only exitErrors, so anything else is cobra's own
		// complaint about the command line: an unknown command, a missing
		// required flag, a stray argument.
		ee = &exitError{code: exitUsage, err: err, usage: true}
	}
	if ee.err != nil {
		fmt.Fprintf(a.stderr, "quorate: %v\n", ee.err)
	}
	if ee.usage && cmd != nil {
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return ee.code
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "quorate",
		Short: "quorate is a self-hosted, distributed rate limiter",
		Long: `quorate is a self-hosted, distributed rate limiter: nodes form a
consistent-hash ring of Raft groups, and every decision is made by a replicated
state machine.

Start a local three-node cluster with "quorate dev", then try "quorate check"
and "quorate status" against it.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError(err)
	})
	root.AddCommand(
		a.agentCmd(),
		a.devCmd(),
		a.checkCmd(),
		a.statusCmd(),
		a.versionCmd(),
		a.benchCmd(),
		a.chaosCmd(),
		a.noopServerCmd(),
		a.genCmd(),
		a.policyCmd(), // policy.go
		a.tenantCmd(), // tenant.go
		a.blockCmd(),  // block.go
		a.unblockCmd(),
		a.leaveCmd(),  // leave.go
		a.removeCmd(), // remove.go
		a.splitCmd(),  // split.go
		a.probeCmd(),  // probe.go
		a.topCmd(),    // top.go
		a.tailCmd(),   // tail.go
	)
	return root
}
