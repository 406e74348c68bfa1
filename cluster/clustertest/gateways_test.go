package clustertest_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/localcluster"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// gatewayProc is one examples/gateway process: a service behind the
// middleware with the limiter embedded.
type gatewayProc struct {
	name string
	addr string
	cmd  *exec.Cmd
	out  *strings.Builder
	done chan struct{}
}

func buildGateway(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(t.TempDir(), "gateway")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/gateway")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building examples/gateway: %v\n%s", err, out)
	}
	return bin
}

func startGateway(t *testing.T, bin string, c *clustertest.Cluster, name string) *gatewayProc {
	t.Helper()
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{name: name, addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), out: &strings.Builder{}, done: make(chan struct{})}
	nodes := []string{c.Nodes[0].RPC, c.Nodes[1].RPC, c.Nodes[2].RPC}
	g.cmd = exec.Command(bin, "-listen", g.addr, "-nodes", strings.Join(nodes, ","), "-credentials", c.Creds.Dir, "-holder", name)
	g.cmd.Stdout, g.cmd.Stderr = g.out, g.out
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("started %s (examples/gateway) pid %d on %s", name, g.cmd.Process.Pid, g.addr)
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		_ = g.cmd.Process.Kill()
		<-g.done
		if t.Failed() {
			t.Logf("--- output of %s ---\n%s", name, g.out.String())
		}
	})
	await.True(t, 20*time.Second, name+" serves", func() bool {
		resp, err := http.Get("http://" + g.addr + "/")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil
	})
	return g
}

// hammer sends requests of tenant hot to the gateways until stop, and
// counts the ones let through at each.
func hammer(gws []*gatewayProc, perGateway int, stop <-chan struct{}, allowed []atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: perGateway}
	cl := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i, g := range gws {
		for range perGateway {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					req, _ := http.NewRequest("GET", "http://"+g.addr+"/", nil)
					req.Header.Set("X-Tenant-Id", "hot")
					req.Header.Set("X-Api-Key-Id", "k")
					resp, err := cl.Do(req)
					if err != nil {
						continue // a killed gateway
					}
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						allowed[i].Add(1)
					}
				}
			})
		}
	}
	return &wg
}

// TestGatewaysShareAHotLimit: three gateway processes, each with the
// limiter embedded, share one hot LEASED limit under excess demand. Over
// the run they admit no more than an exact limiter would (capacity plus
// the rate over the run) and most of it; a gateway killed with -9 strands
// at most its leases: once they expire, the survivors admit the whole
// rate again.
func TestGatewaysShareAHotLimit(t *testing.T) {
	bin := buildGateway(t)
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const capacity, rate = 100, 200 // per second
	if _, err := pb.NewAdminClient(c.Client(0).Conn()).ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: fmt.Sprintf(`
policies:
  - policy_id: hot
    scope: { tenant_id: hot }
    key: [tenant_id]
    algorithm: TOKEN_BUCKET
    config: { rate: %d/s, burst: %d }
    consistency: LEASED
`, rate, capacity)}); err != nil {
		t.Fatal(err)
	}
	gws := []*gatewayProc{startGateway(t, bin, c, "gateway-1"), startGateway(t, bin, c, "gateway-2"), startGateway(t, bin, c, "gateway-3")}
	allowed := make([]atomic.Int64, len(gws))
	stop := make(chan struct{})
	start := time.Now()
	wg := hammer(gws, 4, stop, allowed)

	time.Sleep(4 * time.Second) // the measured span of shared demand, not a wait for readiness
	_ = gws[0].cmd.Process.Kill()
	<-gws[0].done
	killed := time.Now()
	t.Logf("killed gateway-1 (-9) after %v", killed.Sub(start).Round(time.Millisecond))
	beforeKill := allowed[1].Load() + allowed[2].Load()
	// The dead gateway's leases end within the cluster's lease TTL (5s by
	// default); measure the survivors over a span after that.
	time.Sleep(6 * time.Second) // the span in which the dead gateway's leases expire
	from := time.Now()
	fromCount := allowed[1].Load() + allowed[2].Load()
	time.Sleep(3 * time.Second) // the measured span after expiry
	to := time.Now()
	toCount := allowed[1].Load() + allowed[2].Load()
	close(stop)
	wg.Wait()
	end := time.Now()

	total := allowed[0].Load() + allowed[1].Load() + allowed[2].Load()
	allowance := float64(capacity) + rate*end.Sub(start).Seconds()
	t.Logf("admitted %d over %v (gateway-1 %d before its kill; survivors %d before it); an exact limiter allows %.0f",
		total, end.Sub(start).Round(time.Millisecond), allowed[0].Load(), beforeKill, allowance)
	if float64(total) > allowance {
		t.Errorf("over-admitted: %d admitted, an exact limiter allows at most %.0f", total, allowance)
	}
	after := float64(toCount - fromCount)
	exact := float64(capacity) + rate*to.Sub(from).Seconds()
	t.Logf("after the dead gateway's leases expired: %d admitted in %v (rate %.0f/s; an exact limiter allows at most %.0f)",
		toCount-fromCount, to.Sub(from).Round(time.Millisecond), after/to.Sub(from).Seconds(), exact)
	if after < 0.8*rate*to.Sub(from).Seconds() {
		t.Errorf("the survivors admitted %.0f/s after the dead gateway's leases expired; want at least 80%% of %d/s", after/to.Sub(from).Seconds(), rate)
	}
	if float64(total) < 0.8*allowance-float64(rate*6) {
		t.Errorf("admitted %d of %.0f: far below the limit even allowing the dead gateway's stranded leases", total, allowance)
	}
}
