// Package redisdriver is quorate bench's baseline: what most teams run
// today, Redis with the standard Lua token-bucket and sliding-window-counter
// scripts. Each request is one EVALSHA that reads every bucket of the
// request, refills it, decides, and writes and expires it, with the
// caller's now clamped to be no earlier than the bucket's stored time.
//
// The scripts give a request of several items the same all-or-nothing
// semantics as quorate (a denied request charges nothing, and items that
// fit are reported refunded), and decide in exact integer arithmetic, so
// that the same workload asks the same thing of both targets and the
// admission accountant can hold both to the same standard.
package redisdriver

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorate/quorate/bench"
)

//go:embed token_bucket.lua
var tokenBucketLua string

//go:embed sliding_window.lua
var slidingWindowLua string

var (
	tokenBucket   = redis.NewScript(tokenBucketLua)
	slidingWindow = redis.NewScript(slidingWindowLua)
)

// maxExact is 2^53: below it, the doubles of Redis's Lua are exact integers.
const maxExact = 1 << 53

// Supports reports whether the baseline has a script for l: token_bucket
// and sliding_window, with numbers small enough to stay exact.
func Supports(l bench.Limit) error {
	periodUS := l.Period.Microseconds()
	if l.Period%time.Microsecond != 0 || periodUS < 1 {
		return fmt.Errorf("redisdriver: period %v: the scripts count in whole microseconds", l.Period)
	}
	switch l.Algorithm {
	case "token_bucket":
		capacity := l.Burst
		if capacity == 0 {
			capacity = l.Limit
		}
		if capacity > maxExact/periodUS {
			return fmt.Errorf("redisdriver: capacity %d × period %v exceeds 2^53 µs, where Lua numbers stop being exact", capacity, l.Period)
		}
	case "sliding_window":
		if l.Limit > maxExact/periodUS {
			return fmt.Errorf("redisdriver: limit %d × period %v exceeds 2^53 µs, where Lua numbers stop being exact", l.Limit, l.Period)
		}
	default:
		return fmt.Errorf("redisdriver: no standard Lua script for %s (the baseline has token_bucket and sliding_window)", l.Algorithm)
	}
	return nil
}

// Driver is a bench.Driver for Redis.
type Driver struct {
	rdb *redis.Client
	// now is the caller's clock, as the scripts' ARGV[1]; tests replace it.
	now func() time.Time
}

// New connects to the Redis at url (redis://host:port[/db]) with a pool of
// poolSize connections (one per concurrent client of the run), loads the
// scripts and checks that the server answers, so that a wrong address fails
// here with a clear error rather than as a run of errors.
func New(ctx context.Context, url string, poolSize int) (*Driver, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisdriver: %w", err)
	}
	opts.PoolSize = max(poolSize, 1)
	// Keep the pool full: dialing during the measurement would count in the
	// baseline's latency.
	opts.MinIdleConns = opts.PoolSize
	rdb := redis.NewClient(opts)
	d := &Driver{rdb: rdb, now: time.Now}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, s := range []*redis.Script{tokenBucket, slidingWindow} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			rdb.Close()
			return nil, fmt.Errorf("redisdriver: %s: %w", url, err)
		}
	}
	return d, nil
}

// Check runs one request's items through their algorithm's script.
func (d *Driver) Check(ctx context.Context, items []bench.Item, out []bench.Outcome) error {
	if len(items) == 0 {
		return codedError{"INVALID_ARGUMENT", errors.New("redisdriver: no items")}
	}
	alg := items[0].Limit.Algorithm
	script := tokenBucket
	if alg == "sliding_window" {
		script = slidingWindow
	}
	keys := make([]string, len(items))
	args := make([]any, 1, 1+4*len(items))
	args[0] = d.now().UnixMicro()
	for i, it := range items {
		l := it.Limit
		if l.Algorithm != alg {
			return codedError{"INVALID_ARGUMENT", errors.New("redisdriver: items of one request must share an algorithm")}
		}
		if err := Supports(*l); err != nil {
			return codedError{"INVALID_ARGUMENT", err}
		}
		keys[i] = it.Name + ":" + it.Key
		period := l.Period.Microseconds()
		if alg == "sliding_window" {
			args = append(args, l.Limit, period, it.Cost)
			continue
		}
		capacity := l.Burst
		if capacity == 0 {
			capacity = l.Limit
		}
		args = append(args, capacity, l.Limit, period, it.Cost)
	}
	res, err := script.Run(ctx, d.rdb, keys, args...).Slice()
	if err != nil {
		return classify(err)
	}
	if len(res) != len(items) {
		return codedError{"INTERNAL", fmt.Errorf("redisdriver: script returned %d results for %d items", len(res), len(items))}
	}
	for i, r := range res {
		f, ok := r.([]any)
		if !ok || len(f) != 3 {
			return codedError{"INTERNAL", fmt.Errorf("redisdriver: unexpected script result %v", r)}
		}
		decision, remaining, now := toInt(f[0]), toInt(f[1]), toInt(f[2])
		o := bench.Outcome{Remaining: remaining, DecidedAt: now * int64(time.Microsecond)}
		switch decision {
		case 1:
			o.Allowed, o.Reason = true, bench.ReasonWithinLimit
		case 2:
			o.Reason = bench.ReasonRefunded
		default:
			o.Reason = bench.ReasonOverLimit
		}
		out[i] = o
	}
	return nil
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// Close closes the connection pool.
func (d *Driver) Close() error { return d.rdb.Close() }

// codedError gives Redis's errors codes for the report's error counts, in
// the spirit of gRPC's: UNAVAILABLE for the network, REDIS_ERROR for an
// error reply of the server.
type codedError struct {
	code string
	err  error
}

func (e codedError) Error() string { return e.err.Error() }
func (e codedError) Unwrap() error { return e.err }
func (e codedError) Code() string  { return e.code }

func classify(err error) error {
	var rerr redis.Error
	var nerr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return err
	case errors.As(err, &rerr):
		return codedError{"REDIS_ERROR", err}
	case errors.As(err, &nerr) && nerr.Timeout():
		return codedError{"DEADLINE_EXCEEDED", err}
	case errors.As(err, &nerr), errors.Is(err, redis.ErrClosed):
		return codedError{"UNAVAILABLE", err}
	}
	return codedError{"UNKNOWN", err}
}
