package clustertest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/client"
	"github.com/quorate/quorate/cluster/clustertest"
)

// The reference service's configuration format, imported with the CLI.
const envoyConfig = `domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: tenant
    value: t1
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    value: /shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
`

func envoyDesc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestEnvoyRateLimitService: Envoy's ShouldRateLimit, from a client of the
// published protos, against three real nodes whose policies came from
// `quorate policy import --envoy`.
func TestEnvoyRateLimitService(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	file := filepath.Join(t.TempDir(), "ratelimit.yaml")
	if err := os.WriteFile(file, []byte(envoyConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	imp := exec.Command(clustertest.Binary(t), "policy", "import", "--envoy", file, "--addr", c.Nodes[0].RPC,
		"--ca", c.Creds.CA(), "--token", c.Token("operator"))
	out, err := imp.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "applied version") || !strings.Contains(string(out), "live on") {
		t.Fatalf("quorate policy import --envoy: %v\n%s", err, out)
	}

	clients := make([]rlsv3.RateLimitServiceClient, len(c.Nodes))
	for i, n := range c.Nodes {
		conn, err := grpc.NewClient(n.RPC, c.DialOptions("app")...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	call := func(i int, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return clients[i%len(clients)].ShouldRateLimit(ctx, req)
	}
	must := func(i int, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := call(i, req)
		if err != nil {
			t.Fatalf("ShouldRateLimit on n%d: %v", i%len(clients)+1, err)
		}
		return resp
	}

	t.Run("50 per hour over three nodes", func(t *testing.T) {
		// The windows are hours aligned to the epoch: a run that crosses
		// an hour's end would count in two windows, so it runs again with
		// a new key.
		for attempt := 0; ; attempt++ {
			hour := time.Now().Truncate(time.Hour)
			key := fmt.Sprintf("k-%d-%d", time.Now().UnixNano(), attempt)
			var ok, over atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < 200; i += 8 {
						resp, err := call(i, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{envoyDesc("api_key", key)}})
						switch {
						case err != nil:
							errs <- err
						case resp.GetOverallCode() == rlsv3.RateLimitResponse_OK:
							ok.Add(1)
						default:
							over.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("ShouldRateLimit: %v", err)
			}
			if !time.Now().Truncate(time.Hour).Equal(hour) && attempt == 0 {
				continue
			}
			if ok.Load() != 50 || over.Load() != 150 {
				t.Fatalf("200 requests of a 50/hour descriptor over 3 nodes: %d OK, %d OVER_LIMIT; want exactly 50 and 150", ok.Load(), over.Load())
			}
			return
		}
	})

	t.Run("hits_addend counts", func(t *testing.T) {
		req := func(hits uint32) *rlsv3.RateLimitRequest {
			return &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: []*ratelimitv3.RateLimitDescriptor{envoyDesc("tenant", "t1")}}
		}
		for i, step := range []struct {
			hits      uint32
			code      rlsv3.RateLimitResponse_Code
			remaining uint32
		}{
			{4, rlsv3.RateLimitResponse_OK, 6},
			{4, rlsv3.RateLimitResponse_OK, 2},
			{4, rlsv3.RateLimitResponse_OVER_LIMIT, 2}, // denied: consumed nothing
			{2, rlsv3.RateLimitResponse_OK, 0},
		} {
			resp := must(i, req(step.hits))
			st := resp.GetStatuses()[0]
			if resp.GetOverallCode() != step.code || st.GetLimitRemaining() != step.remaining {
				t.Fatalf("step %d (hits %d on n%d): %v remaining %d; want %v remaining %d", i, step.hits, i%3+1, resp.GetOverallCode(), st.GetLimitRemaining(), step.code, step.remaining)
			}
			if l := st.GetCurrentLimit(); l.GetRequestsPerUnit() != 10 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
				t.Fatalf("current_limit %v", l)
			}
		}
	})

	t.Run("shadow mode never denies", func(t *testing.T) {
		for i := range 5 {
			resp := must(i, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{envoyDesc("route", "/shadow")}})
			if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("shadow, request %d: %v", i+1, resp)
			}
			if i > 0 && resp.GetStatuses()[0].GetLimitRemaining() != 0 {
				t.Fatalf("shadow request %d over its limit of 1 reports remaining %d", i+1, resp.GetStatuses()[0].GetLimitRemaining())
			}
		}
	})

	t.Run("unknown domain answers as the reference", func(t *testing.T) {
		resp := must(0, &rlsv3.RateLimitRequest{Domain: "nope", Descriptors: []*ratelimitv3.RateLimitDescriptor{envoyDesc("api_key", "x"), envoyDesc("a", "b")}})
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(resp.GetStatuses()) != 2 {
			t.Fatalf("unknown domain: %v", resp)
		}
		for _, st := range resp.GetStatuses() {
			if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetCurrentLimit() != nil || st.GetLimitRemaining() != 0 {
				t.Fatalf("unknown domain, status %v: want OK with no limit", st)
			}
		}
	})

	t.Run("bad requests are InvalidArgument", func(t *testing.T) {
		for _, tc := range []struct {
			req   *rlsv3.RateLimitRequest
			field string
		}{
			{&rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{envoyDesc("api_key", "x")}}, "domain"},
			{&rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors"},
			{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{envoyDesc("", "x")}}, "descriptors[0].entries[0].key"},
		} {
			_, err := call(1, tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+": ") {
				t.Fatalf("want InvalidArgument naming %s, got %v", tc.field, err)
			}
		}
	})

	t.Run("no token, no answer", func(t *testing.T) {
		ca, err := client.WithCAFile(c.Creds.CA())
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(c.Nodes[2].RPC, ca)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{envoyDesc("api_key", "x")}})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("without a token: %v, want Unauthenticated", err)
		}
	})
}
