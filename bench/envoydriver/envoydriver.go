// Package envoydriver is quorate bench's driver for Envoy's rate limit
// API: each request is one envoy.service.ratelimit.v3 ShouldRateLimit call
// (a client of the published protos, as Envoy sends them), round-robin over
// the nodes. The limits of the workload become imported Envoy policies
// (policy/envoyconf), applied through the Admin API the first time a limit
// is used, so that the same workload runs through ShouldRateLimit as
// through RateLimiter.Check.
package envoydriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quorate/quorate/bench"
	"github.com/quorate/quorate/policy"
	"github.com/quorate/quorate/policy/envoyconf"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// Domain is the Envoy domain the driver's limits are imported under.
const Domain = "quorate-bench"

// Options configure Open.
type Options struct {
	// DialOptions are added to every connection: TLS and a token with the
	// check and admin scopes (the limits are imported as policies).
	DialOptions []grpc.DialOption
}

// Driver is a bench.Driver over ShouldRateLimit.
type Driver struct {
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
	admins  []pb.AdminClient
	next    atomic.Uint64

	// keys maps each *bench.Limit to the descriptor key its policy
	// matches; mu serialises importing one.
	keys sync.Map
	mu   sync.Mutex
}

// Open returns a driver for the nodes at addrs (gRPC host:port).
func Open(addrs []string, o Options) (*Driver, error) {
	if len(addrs) == 0 {
		return nil, errors.New("envoydriver: no node addresses")
	}
	d := &Driver{}
	for _, a := range addrs {
		c, err := grpc.NewClient(a, o.DialOptions...)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("envoydriver: %w", err)
		}
		d.conns = append(d.conns, c)
		d.clients = append(d.clients, rlsv3.NewRateLimitServiceClient(c))
		d.admins = append(d.admins, pb.NewAdminClient(c))
	}
	return d, nil
}

// units are the Envoy units a workload's period can be.
var units = map[time.Duration]envoyconf.Unit{
	time.Second: "SECOND", time.Minute: "MINUTE", time.Hour: "HOUR", 24 * time.Hour: "DAY",
	7 * 24 * time.Hour: "WEEK", 30 * 24 * time.Hour: "MONTH", 365 * 24 * time.Hour: "YEAR",
}

// Supports reports whether a limit can be written in Envoy's terms.
func Supports(l *bench.Limit) error {
	if _, ok := units[l.Period]; !ok {
		return fmt.Errorf("envoydriver: period %v is not an Envoy unit (1s, 1m, 1h, 24h, 168h, 720h, 8760h)", l.Period)
	}
	if l.Limit <= 0 || l.Limit > 1<<32-1 {
		return fmt.Errorf("envoydriver: limit %d does not fit requests_per_unit", l.Limit)
	}
	return nil
}

// key is the descriptor key of l's policy, importing it on first use.
func (d *Driver) key(ctx context.Context, name string, l *bench.Limit) (string, error) {
	if k, ok := d.keys.Load(l); ok {
		return k.(string), nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if k, ok := d.keys.Load(l); ok {
		return k.(string), nil
	}
	if err := Supports(l); err != nil {
		return "", status.Error(codes.InvalidArgument, err.Error())
	}
	k := fmt.Sprintf("%s.%s.%d.%v.%d", name, strings.ToLower(l.Algorithm), l.Limit, l.Period, l.Burst)
	cfg := &envoyconf.Config{Domains: []envoyconf.Domain{{Name: Domain, Descriptors: []*envoyconf.Descriptor{{
		Key: k, RateLimit: &envoyconf.RateLimit{Unit: units[l.Period], RequestsPerUnit: uint32(l.Limit)},
	}}}}}
	ps, err := envoyconf.Policies(cfg, envoyconf.Options{Algorithm: strings.ToUpper(l.Algorithm)})
	if err != nil {
		return "", err
	}
	ps[0].FailBehavior = policy.FailClosed
	if l.FailOpen {
		ps[0].FailBehavior = policy.FailOpen
	}
	if l.Burst > 0 {
		ps[0].Config.Capacity = l.Burst
	}
	doc, err := yaml.Marshal(struct {
		Policies []policy.Policy `yaml:"policies"`
	}{ps})
	if err != nil {
		return "", err
	}
	resp, err := d.admins[0].ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: string(doc), SourceName: "bench"})
	if err != nil {
		return "", fmt.Errorf("envoydriver: importing the workload's limit: %w", err)
	}
	if err := d.awaitVersion(ctx, resp.GetVersion()); err != nil {
		return "", err
	}
	d.keys.Store(l, k)
	return k, nil
}

// awaitVersion waits until every node decides with policy version v: a
// node behind would answer "no limit".
func (d *Driver) awaitVersion(ctx context.Context, v uint64) error {
	for i, a := range d.admins {
		for {
			st, err := a.Status(ctx, &pb.StatusRequest{})
			if err != nil {
				return fmt.Errorf("envoydriver: node %d: %w", i, err)
			}
			if st.GetPolicyVersion() >= v {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond): // a poll, as quorate policy apply --wait does
			}
		}
	}
	return nil
}

// Check sends one ShouldRateLimit with one descriptor per item, its cost
// as the descriptor's hits_addend.
func (d *Driver) Check(ctx context.Context, items []bench.Item, out []bench.Outcome) error {
	req := &rlsv3.RateLimitRequest{Domain: Domain, Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(items))}
	for i, it := range items {
		k, err := d.key(ctx, it.Name, it.Limit)
		if err != nil {
			return err
		}
		desc := &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: it.Key}}}
		if it.Cost > 1 {
			desc.HitsAddend = wrapperspb.UInt64(uint64(it.Cost))
		}
		req.Descriptors[i] = desc
	}
	resp, err := d.clients[(d.next.Add(1)-1)%uint64(len(d.clients))].ShouldRateLimit(ctx, req)
	if err != nil {
		return err
	}
	sts := resp.GetStatuses()
	if len(sts) != len(items) {
		return status.Errorf(codes.Internal, "server returned %d statuses for %d descriptors", len(sts), len(items))
	}
	for i, st := range sts {
		out[i] = bench.Outcome{Allowed: st.GetCode() == rlsv3.RateLimitResponse_OK, Reason: bench.ReasonWithinLimit, Remaining: int64(st.GetLimitRemaining())}
		if !out[i].Allowed {
			out[i].Reason = bench.ReasonOverLimit
		}
	}
	return nil
}

// Close closes the connections.
func (d *Driver) Close() error {
	var errs []error
	for _, c := range d.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
