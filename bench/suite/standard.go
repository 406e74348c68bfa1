package suite

import (
	"time"

	"github.com/quorate/quorate/bench"
)

// StandardDuration is each target's measured time per scenario of the
// standard suite: long enough for steady state and a few hundred thousand
// latency samples, short enough that the suite runs in a few minutes on a
// laptop.
const StandardDuration = 5 * time.Second

// Standard returns the standard suite, whose report the project quotes.
// Each scenario isolates one question: unary and batched throughput in each
// mode, admission accuracy under skew and under a single hot key, latency
// without coordinated omission, and a gateway-like mix. duration is each
// target's measured time per scenario (0: StandardDuration).
func Standard(duration time.Duration) []Scenario {
	if duration <= 0 {
		duration = StandardDuration
	}
	tb := func(limit int64) bench.Limit {
		return bench.Limit{Algorithm: "token_bucket", Limit: limit, Period: time.Second}
	}
	uniform := func(items int) bench.Workload {
		return bench.Workload{Distribution: bench.Uniform, Keys: 10_000, Items: items, Cost: 1, Limit: tb(100)}
	}
	closed := func(c int) bench.Load {
		return bench.Load{Concurrency: c, Duration: duration}
	}
	var out []Scenario
	for _, mode := range []string{"strict", "leased"} {
		out = append(out,
			Scenario{
				Name: mode + "-unary", Mode: mode,
				Description: "throughput and latency of one-limit requests, load spread over every shard",
				Workload:    uniform(1), Load: closed(32),
			},
			Scenario{
				Name: mode + "-batch10", Mode: mode,
				Description: "ten limits per request: what batching buys per check",
				Workload:    uniform(10), Load: closed(32),
			},
		)
	}
	return append(out,
		Scenario{
			Name: "strict-batch100", Mode: "strict",
			Description: "a hundred limits per request, the API's large batch",
			Workload:    uniform(100), Load: closed(8),
		},
		Scenario{
			Name: "strict-zipf", Mode: "strict",
			Description: "Zipf-skewed keys (hot tenants, long tail) at 50/s per key: accuracy under skew",
			Workload: bench.Workload{Distribution: bench.Zipf, Keys: 10_000, Items: 1, Cost: 1,
				Limit: tb(50)},
			Load: closed(32),
		},
		Scenario{
			Name: "strict-hot", Mode: "strict",
			Description: "one hot key at 100/s, demand far above it: admission accuracy at the limit",
			Workload: bench.Workload{Distribution: bench.Hot, Items: 1, Cost: 1,
				Limit: tb(100)},
			Load: closed(32),
		},
		Scenario{
			Name: "leased-hot", Mode: "leased",
			Description: "the same hot key answered from leases: leased admission accuracy at the limit",
			Workload: bench.Workload{Distribution: bench.Hot, Items: 1, Cost: 1,
				Limit: tb(100)},
			Load: closed(32),
		},
		Scenario{
			Name: "strict-open", Mode: "strict",
			Description: "open loop at half of strict-unary's throughput: latency from the scheduled send time, free of coordinated omission",
			Workload:    uniform(1),
			// 100 req/s only if strict-unary has no result.
			Load:     bench.Load{Concurrency: 512, Rate: 100, Duration: duration},
			RateFrom: "strict-unary", RateFraction: 0.5,
		},
		Scenario{
			Name: "strict-mix", Mode: "strict",
			Description: "multi-tenant mix, three limits per request (sliding window 20/s each): a gateway's traffic",
			Workload: bench.Workload{Distribution: bench.Mix, Keys: 1000, Items: 3, Cost: 1,
				Limit: bench.Limit{Algorithm: "sliding_window", Limit: 20, Period: time.Second}},
			Load: closed(32),
		},
	)
}
