package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/quorate/quorate/cluster"
)

// limitFlags are the agent's flags for cluster.Limits: request bounds and
// the breaker.
type limitFlags struct {
	maxRecvMsgSize       int
	maxConcurrentStreams uint32
	maxRequestItems      int
	maxRequestCost       int64
	breakerFailures      int
	breakerCooldown      time.Duration
}

func (f *limitFlags) register(fl *pflag.FlagSet) {
	fl.IntVar(&f.maxRecvMsgSize, "max-recv-msg-size", cluster.DefaultMaxRecvMsgSize, "largest gRPC message a client may send, in bytes; larger ones are refused (RESOURCE_EXHAUSTED) before they are decoded")
	fl.Uint32Var(&f.maxConcurrentStreams, "max-concurrent-streams", cluster.DefaultMaxConcurrentStreams, "most calls in progress on one gRPC connection; further calls wait")
	fl.IntVar(&f.maxRequestItems, "max-request-items", cluster.DefaultMaxRequestItems, "most items in one check (INVALID_ARGUMENT beyond, counted before the items are decoded)")
	fl.Int64Var(&f.maxRequestCost, "max-request-cost", cluster.DefaultMaxRequestCost, "largest sum of the item costs of one check (INVALID_ARGUMENT beyond)")
	fl.IntVar(&f.breakerFailures, "breaker-failures", cluster.DefaultBreakerFailures, "failures of a shard in a row (no leader or quorum within --check-timeout, leadership lost) that open its breaker; a caller's cancellation or short deadline never counts")
	fl.DurationVar(&f.breakerCooldown, "breaker-cooldown", cluster.DefaultBreakerCooldown, "how long an open breaker answers checks from their fail mode before it probes the shard again (a new leader closes it at once)")
}

// limits checks the flags; every error names its flag.
func (f *limitFlags) limits() (cluster.Limits, error) {
	for _, n := range []struct {
		flag string
		v    int64
	}{
		{"--max-recv-msg-size", int64(f.maxRecvMsgSize)},
		{"--max-concurrent-streams", int64(f.maxConcurrentStreams)},
		{"--max-request-items", int64(f.maxRequestItems)},
		{"--max-request-cost", f.maxRequestCost},
		{"--breaker-failures", int64(f.breakerFailures)},
		{"--breaker-cooldown", int64(f.breakerCooldown)},
	} {
		if n.v <= 0 {
			return cluster.Limits{}, fmt.Errorf("%s: must be positive", n.flag)
		}
	}
	return cluster.Limits{
		MaxRecvMsgSize: f.maxRecvMsgSize, MaxConcurrentStreams: f.maxConcurrentStreams,
		MaxRequestItems: f.maxRequestItems, MaxRequestCost: f.maxRequestCost,
		BreakerFailures: f.breakerFailures, BreakerCooldown: f.breakerCooldown,
	}, nil
}
