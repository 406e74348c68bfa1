package clustertest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// 20 a second, one at a time, a request held at most 5s: a burst of 50
// is shaped over 2.45s and none is denied.
const throttlePolicies = `policies:
  - policy_id: shaped
    scope: { tenant_id: "shape_*" }
    key: [tenant_id]
    algorithm: GCRA
    config: { rate: 20/s, burst: 1 }
    mode: THROTTLE
    throttle: { max_delay: 5s }
`

const (
	throttleBurst    = 50
	throttleRate     = 20.0 // per second, as the policy says
	throttleInterval = 50 * time.Millisecond
	// rateTolerance bounds the achieved rate: each arrival is its turn
	// plus the answer's way back, whose spread over a 2.45s burst is
	// at most 10% of it.
	rateTolerance = 0.10
)

type throttleAnswer struct {
	Decision string `json:"decision"`
	DelayMs  int64  `json:"delay_ms"`
	Reason   string `json:"reason"`
	header   string // X-RateLimit-Delay-Ms
}

// TestThrottleShapesBurst: a burst of 50 HTTP checks sent at once to a
// 20/s THROTTLE policy on a 3-node cluster: each request "arrives" when
// its answer came back plus its delay_ms (the caller honouring the
// THROTTLE), and the arrivals follow the configured rate: 50 arrivals
// 2.45s apart first to last, 20/s within 10%, never more than 20 (+1, the
// burst) in any second.
func TestThrottleShapesBurst(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	applied, err := adminClient(t, c, 0, "operator").ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: throttlePolicies, SourceName: "throttle.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	awaitVersion(t, c, applied.GetVersion(), 5*time.Second)

	arrivals, answers := throttleBurstOf(t, c, "shape_1")
	for i, a := range answers {
		if a.Decision != "ALLOW" && a.Decision != "THROTTLE" || a.header != strconv.FormatInt(a.DelayMs, 10) && a.DelayMs > 0 {
			t.Fatalf("request %d: %+v; want ALLOW or THROTTLE with the delay in X-RateLimit-Delay-Ms", i, a)
		}
	}
	throttled := 0
	for _, a := range answers {
		if a.Decision == "THROTTLE" {
			throttled++
		}
	}
	slices.SortFunc(arrivals, time.Time.Compare)
	first, last := arrivals[0], arrivals[len(arrivals)-1]
	span := last.Sub(first)
	rate := float64(len(arrivals)-1) / span.Seconds()
	maxInSecond := maxWithin(arrivals, time.Second)
	t.Logf("burst of %d at %.0f/s: %d THROTTLE; arrivals first +0s, last +%s; achieved %.2f/s; at most %d in any 1s; longest delay %dms",
		throttleBurst, throttleRate, throttled, span.Round(time.Millisecond), rate, maxInSecond, longestDelay(answers))
	if throttled != throttleBurst-1 {
		t.Errorf("%d of %d throttled, want all but the first", throttled, throttleBurst)
	}
	if rate > throttleRate*(1+rateTolerance) || rate < throttleRate*(1-rateTolerance) {
		t.Errorf("achieved %.2f/s, want %.0f/s within %.0f%%", rate, throttleRate, rateTolerance*100)
	}
	if maxInSecond > int(throttleRate)+1 {
		t.Errorf("%d arrivals within one second, want at most %d", maxInSecond, int(throttleRate)+1)
	}
}

// throttleBurstOf sends the burst at once, waits each answer's delay, and
// returns when each request arrived and what it was answered.
func throttleBurstOf(t *testing.T, c *clustertest.Cluster, tenant string) ([]time.Time, []throttleAnswer) {
	t.Helper()
	arrivals := make([]time.Time, throttleBurst)
	answers := make([]throttleAnswer, throttleBurst)
	errs := make([]error, throttleBurst)
	start := make(chan struct{})
	var wg sync.WaitGroup
	body := `{"subject":{"tenant_id":"` + tenant + `"}}`
	for i := range throttleBurst {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = throttleCheck(c, i%len(c.Nodes), body)
			// The caller honours the THROTTLE: this is what is measured,
			// not a wait for a state.
			time.Sleep(time.Duration(answers[i].DelayMs) * time.Millisecond)
			arrivals[i] = time.Now()
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return arrivals, answers
}

func throttleCheck(c *clustertest.Cluster, i int, body string) (throttleAnswer, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+c.Nodes[i].HTTP+"/v1/limit/check", strings.NewReader(body))
	if err != nil {
		return throttleAnswer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token("app"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return throttleAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return throttleAnswer{}, err
	}
	var a throttleAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		return a, err
	}
	a.header = resp.Header.Get("X-Ratelimit-Delay-Ms")
	return a, nil
}

// maxWithin is the most of the sorted times within any window of length w.
func maxWithin(ts []time.Time, w time.Duration) int {
	most, lo := 0, 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= w {
			lo++
		}
		most = max(most, hi-lo+1)
	}
	return most
}

func longestDelay(as []throttleAnswer) int64 {
	var d int64
	for _, a := range as {
		d = max(d, a.DelayMs)
	}
	return d
}
