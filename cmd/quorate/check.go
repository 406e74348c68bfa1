package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/internal/cliview"
	"github.com/quorate/quorate/rpc/quoratev1"
)

// checkFlags are the flags of "quorate check": one Item and its request.
type checkFlags struct {
	creds          credFlags
	addrs          []string
	route          string
	name           string
	key            string
	algorithm      string
	limit          int64
	period         time.Duration
	burst          int64
	cost           int64
	mode           string
	fail           string
	idempotencyKey string
	requestID      string
	timeout        time.Duration
	json           bool
	descriptors    []string       // a descriptor check instead of an item (policy.go)
	flags          *pflag.FlagSet // which item flags were given
}

func (a *app) checkCmd() *cobra.Command {
	var f checkFlags
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check one request against one limit",
		Long: `Check one request against one limit and print the decision.

The limit is named on the command line: the same --name and --key always
count against the same bucket. Numbers are validated by the server.

With --descriptor NAME=VALUE (repeated) the check says who the request is
and what it touches instead, and the cluster's policies decide; it prints
every policy's result (docs/api.md).

Exit status: 0 if the request was allowed, 1 if it was denied, 2 on any error
(bad flags, unreachable node, or an error from the server, printed with its
gRPC code).`,
		Example: `  quorate check --addr 127.0.0.1:7401 --name api --key user:42 \
    --algorithm token_bucket --limit 100 --period 1m
  quorate check --addr 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403 --name api --key user:42 \
    --limit 100 --period 1m    # straight to the leader of the key's shard
  quorate check --descriptor tenant_id=t_44 --descriptor tenant_tier=PRO --descriptor route=/v1/payments`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return usageError(err)
			}
			return a.check(cmd.Context(), &f, req)
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringSliceVar(&f.addrs, "addr", []string{"127.0.0.1:7401"}, "gRPC address of any node; several (comma-separated or repeated) to route by --route")
	fl.StringVar(&f.route, "route", "", "leader (learn the cluster from the --addr nodes, send to the item's shard leader) or any (the first --addr that can be reached); default leader with several --addr, any with one")
	fl.StringVar(&f.name, "name", "", "name of the limit (required)")
	fl.StringVar(&f.key, "key", "", "bucket key, e.g. user:42 (required)")
	fl.StringVar(&f.algorithm, "algorithm", "token_bucket", "one of "+strings.Join(client.AlgorithmNames(), ", "))
	fl.Int64Var(&f.limit, "limit", 0, "units admitted per period (required)")
	fl.DurationVar(&f.period, "period", 0, "period the limit counts over, e.g. 1s, 1m (required)")
	fl.Int64Var(&f.burst, "burst", 0, "bucket capacity; 0 means --limit")
	fl.Int64Var(&f.cost, "cost", 1, "units this request takes")
	fl.StringVar(&f.mode, "mode", "strict", "strict (decided in the shard's Raft group) or leased (from the node's lease)")
	fl.StringVar(&f.fail, "fail", "open", "when the shard cannot decide: open (allow) or closed (deny)")
	fl.StringVar(&f.idempotencyKey, "idempotency-key", "", "charge a retried request with this key at most once")
	fl.StringVar(&f.requestID, "request-id", "", "request id echoed in the server's logs")
	fl.DurationVar(&f.timeout, "timeout", 2*time.Second, "deadline of the call")
	fl.BoolVar(&f.json, "json", false, "print the answer as JSON, as the HTTP decision API answers (docs/api.md)")
	fl.StringArrayVar(&f.descriptors, "descriptor", nil, "NAME=VALUE, repeated: check by descriptors, the cluster's policies decide (instead of --name, --key, ...)")
	f.creds.register(fl)
	f.flags = fl
	return cmd
}

// request builds the CheckRequest the flags describe. Only the names are
// checked here; the numbers are the server's to judge.
func (f *checkFlags) request() (*quoratev1.CheckRequest, error) {
	if len(f.descriptors) > 0 {
		return f.descriptorRequest()
	}
	if err := f.requireItemFlags(); err != nil {
		return nil, err
	}
	alg, err := client.ParseAlgorithm(f.algorithm)
	if err != nil {
		return nil, fmt.Errorf("--algorithm: %w", err)
	}
	mode, err := client.ParseMode(f.mode)
	if err != nil {
		return nil, fmt.Errorf("--mode: %w", err)
	}
	fail, err := client.ParseFailMode(f.fail)
	if err != nil {
		return nil, fmt.Errorf("--fail: %w", err)
	}
	if f.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %v: must be positive", f.timeout)
	}
	if _, err := f.routing(); err != nil {
		return nil, err
	}
	return &quoratev1.CheckRequest{
		RequestId: f.requestID,
		Mode:      mode,
		Items: []*quoratev1.Item{{
			Name:           f.name,
			Key:            f.key,
			Algorithm:      alg,
			Limit:          f.limit,
			Period:         durationpb.New(f.period),
			Burst:          f.burst,
			Cost:           f.cost,
			Fail:           fail,
			IdempotencyKey: f.idempotencyKey,
		}},
	}, nil
}

func (a *app) check(ctx context.Context, f *checkFlags, req *quoratev1.CheckRequest) error {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	resp, err := f.send(ctx, req) // check_route.go
	code := checkExitCode(resp, err)
	if err != nil {
		return &exitError{code: code, err: cliview.RPCError(err, strings.Join(f.addrs, ", "), f.timeout)}
	}
	if f.json {
		if err := cliview.CheckJSON(a.stdout, f.requestID, resp); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
	} else if len(f.descriptors) > 0 {
		cliview.DescriptorCheck(a.stdout, resp)
	} else {
		cliview.Check(a.stdout, resp)
	}
	if code == exitUsage {
		return &exitError{code: code, err: errors.New("the server returned no decision")}
	}
	if code != exitOK {
		return &exitError{code: code}
	}
	return nil
}

// checkExitCode maps the outcome of a Check call to the exit status of
// "quorate check": 0 allowed (or throttled: admitted after a delay), 1 denied, 2 for any error, including a
// response without a decision.
func checkExitCode(resp *quoratev1.CheckResponse, err error) int {
	if err != nil {
		return exitUsage
	}
	switch resp.GetDecision() {
	case quoratev1.Decision_DECISION_ALLOW, quoratev1.Decision_DECISION_THROTTLE:
		return exitOK
	case quoratev1.Decision_DECISION_DENY:
		return exitFailure
	default:
		return exitUsage
	}
}
