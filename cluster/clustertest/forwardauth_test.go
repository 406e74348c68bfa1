package clustertest_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorate/quorate/cluster/clustertest"
	"github.com/quorate/quorate/internal/await"
	"github.com/quorate/quorate/localcluster"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// The policies the forward-auth test applies: five requests an hour for
// each five_* tenant, and a roomy limit for tenants whose policy fails
// open or closed, so that only the cluster's state decides them.
const forwardAuthPolicies = `policies:
  - policy_id: fa_five
    scope: { tenant_id: "five_*" }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 5/1h }
  - policy_id: fa_open
    scope: { tenant_id: "open_*" }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 1000/1h }
    fail_behavior: FAIL_OPEN
  - policy_id: fa_closed
    scope: { tenant_id: "closed_*" }
    key: [tenant_id]
    algorithm: FIXED_WINDOW
    config: { limit: 1000/1h }
    fail_behavior: FAIL_CLOSED
extraction:
  trusted_proxies: [127.0.0.1]
`

// caddyfile is examples/caddy/Caddyfile's configuration with the test's
// addresses: one site that asks quorate with the token, one without.
const caddyfile = `{
	admin off
	auto_https off
}

http://127.0.0.1:{{port}} {
	handle /_ready {
		respond "ready" 200
	}
	handle {
		forward_auth {{quorate}} {
			uri /v1/forward-auth
			header_up Authorization "Bearer {{token}}"
			copy_headers X-Request-Id X-Policy-Id X-Rate-Limit-Decision
		}
		reverse_proxy {{upstream}}
	}
}

http://127.0.0.1:{{port_notoken}} {
	forward_auth {{quorate}} {
		uri /v1/forward-auth
	}
	reverse_proxy {{upstream}}
}
`

// nginxConf is examples/nginx/nginx.conf's configuration with the test's
// addresses and paths, and a server without the token.
const nginxConf = `daemon off;
master_process off;
worker_processes 1;
pid {{dir}}/nginx.pid;
error_log stderr notice;
events { worker_connections 64; }
http {
	access_log off;
	client_body_temp_path {{dir}}/body;
	proxy_temp_path {{dir}}/proxy;
	fastcgi_temp_path {{dir}}/fastcgi;
	uwsgi_temp_path {{dir}}/uwsgi;
	scgi_temp_path {{dir}}/scgi;

	server {
		listen 127.0.0.1:{{port}};
		location = /_ready { return 200 "ready"; }

		location = /_quorate {
			internal;
			proxy_pass http://{{quorate}}/v1/forward-auth?deny_status=403;
			proxy_pass_request_body off;
			proxy_set_header Content-Length "";
			proxy_set_header Authorization "Bearer {{token}}";
			proxy_set_header X-Forwarded-Uri $request_uri;
			proxy_set_header X-Forwarded-Method $request_method;
			proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
		}

		location / {
			auth_request /_quorate;
			auth_request_set $quorate_decision $upstream_http_x_rate_limit_decision;
			auth_request_set $quorate_reason $upstream_http_x_rate_limit_reason;
			auth_request_set $quorate_retry_after $upstream_http_retry_after;
			auth_request_set $quorate_policy $upstream_http_ratelimit_policy;
			auth_request_set $quorate_ratelimit $upstream_http_ratelimit;
			auth_request_set $quorate_limit $upstream_http_x_ratelimit_limit;
			auth_request_set $quorate_remaining $upstream_http_x_ratelimit_remaining;
			auth_request_set $quorate_reset $upstream_http_x_ratelimit_reset;
			auth_request_set $quorate_request_id $upstream_http_x_request_id;
			error_page 403 = @quorate_denied;
			proxy_set_header X-Request-Id $quorate_request_id;
			proxy_pass http://{{upstream}};
		}

		location @quorate_denied {
			add_header Retry-After $quorate_retry_after always;
			add_header RateLimit-Policy $quorate_policy always;
			add_header RateLimit $quorate_ratelimit always;
			add_header X-RateLimit-Limit $quorate_limit always;
			add_header X-RateLimit-Remaining $quorate_remaining always;
			add_header X-RateLimit-Reset $quorate_reset always;
			add_header X-Request-Id $quorate_request_id always;
			if ($quorate_decision != "DENY") { return 403; }
			if ($quorate_reason = "STORE_UNAVAILABLE") { return 503; }
			return 429;
		}
	}

	server {
		listen 127.0.0.1:{{port_notoken}};
		location = /_quorate {
			internal;
			proxy_pass http://{{quorate}}/v1/forward-auth?deny_status=403;
			proxy_pass_request_body off;
			proxy_set_header Content-Length "";
		}
		location / {
			auth_request /_quorate;
			proxy_pass http://{{upstream}};
		}
	}
}
`

// upstream counts the requests that reach it, by tenant.
type upstream struct {
	mu   sync.Mutex
	hits map[string]int // guarded by mu
	srv  *httptest.Server
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{hits: map[string]int{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.hits[r.Header.Get("X-Tenant-Id")]++
		u.mu.Unlock()
		_, _ = io.WriteString(w, "upstream")
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) count(tenant string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hits[tenant]
}

// proxy is a reverse proxy process the test owns.
type proxy struct {
	name          string
	addr, notoken string
}

// startProxy writes config (with {{...}} filled from vars) to a temp dir
// and runs bin with args (where "{{config}}" and "{{dir}}" are replaced),
// stops it when the test ends, and waits until it answers /_ready.
func startProxy(t *testing.T, name, bin string, args []string, config string, vars map[string]string, env ...string) *proxy {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		// Debian installs nginx in /usr/sbin, which a user's PATH may lack.
		path, err = exec.LookPath(filepath.Join("/usr/sbin", bin))
	}
	if err != nil {
		t.Fatalf("%s is not installed (README: Development): %v", bin, err)
	}
	dir := t.TempDir()
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	vars["port"], vars["port_notoken"], vars["dir"] = strconv.Itoa(ports[0]), strconv.Itoa(ports[1]), dir
	for k, v := range vars {
		config = strings.ReplaceAll(config, "{{"+k+"}}", v)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		args[i] = strings.NewReplacer("{{config}}", cfg, "{{dir}}", dir).Replace(a)
	}
	for i, e := range env {
		env[i] = strings.ReplaceAll(e, "{{dir}}", dir)
	}
	out := &localcluster.Log{Max: 64 << 10}
	p, err := localcluster.StartProc(path, args, localcluster.ProcOptions{Stdout: out, Stderr: out, Env: env, Detach: true})
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Logf("started %s (pid %d) on 127.0.0.1:%d and :%d", name, p.PID(), ports[0], ports[1])
	t.Cleanup(func() {
		if p.Stop(syscall.SIGTERM, 10*time.Second) {
			t.Errorf("%s (pid %d) did not exit on SIGTERM; killed", name, p.PID())
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, out.String())
		}
	})
	px := &proxy{name: name, addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), notoken: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	await.Until(t, 20*time.Second, func() error {
		if !p.Running() {
			return fmt.Errorf("%s exited (%s):\n%s", name, p.Exit(), out.String())
		}
		resp, err := http.Get("http://" + px.addr + "/_ready")
		if err != nil {
			return fmt.Errorf("%s not answering yet: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s /_ready: %d", name, resp.StatusCode)
		}
		return nil
	})
	return px
}

type proxied struct {
	code       int
	body       string
	retryAfter string
}

func through(t *testing.T, addr, tenant string) proxied {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+"/v1/orders?page=2", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant-Id", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return proxied{resp.StatusCode, string(b), resp.Header.Get("Retry-After")}
}

// TestForwardAuthProxies runs real Caddy (forward_auth) and nginx
// (auth_request) in front of an upstream, asking a real cluster: a tenant
// with capacity 5 gets exactly 5 responses from the upstream, then 429
// with Retry-After; a proxy without quorate's token lets nothing through;
// with a majority of nodes stopped, a FAIL_OPEN policy lets requests
// through and a FAIL_CLOSED one answers 503.
func TestForwardAuthProxies(t *testing.T) {
	c := clustertest.Start(t, 3, clustertest.Options{Shards: 4})
	admin := adminClient(t, c, 0, "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := admin.ApplyPolicies(ctx, &pb.ApplyPoliciesRequest{Document: forwardAuthPolicies, SourceName: "fa.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	awaitVersion(t, c, res.GetVersion(), 10*time.Second)
	if code, body := httpDo(t, "GET", "http://"+c.Nodes[1].HTTP+"/v1/admin/policies", c.Token("operator"), ""); code != 200 ||
		!strings.Contains(body, `"extraction":{"trusted_proxies":["127.0.0.1"]}`) {
		t.Fatalf("the extraction is not in the replicated set on n2: %d %s", code, body)
	}

	up := newUpstream(t)
	vars := func() map[string]string {
		return map[string]string{"quorate": c.Nodes[0].HTTP, "token": c.Token("app"), "upstream": strings.TrimPrefix(up.srv.URL, "http://")}
	}
	proxies := []*proxy{
		startProxy(t, "caddy", "caddy", []string{"run", "--config", "{{config}}", "--adapter", "caddyfile"}, caddyfile, vars(),
			"XDG_CONFIG_HOME={{dir}}", "XDG_DATA_HOME={{dir}}", "HOME={{dir}}"),
		startProxy(t, "nginx", "nginx", []string{"-c", "{{config}}", "-p", "{{dir}}"}, nginxConf, vars()),
	}

	for _, px := range proxies {
		t.Run(px.name+"/five then 429", func(t *testing.T) {
			tenant := "five_" + px.name
			for i := range 8 {
				got := through(t, px.addr, tenant)
				switch {
				case i < 5 && (got.code != 200 || got.body != "upstream"):
					t.Fatalf("request %d: %d %q, want 200 from the upstream", i+1, got.code, got.body)
				case i >= 5 && got.code != 429:
					t.Fatalf("request %d: %d %q, want 429", i+1, got.code, got.body)
				case i >= 5:
					if n, err := strconv.Atoi(got.retryAfter); err != nil || n < 1 {
						t.Fatalf("request %d: Retry-After %q, want whole seconds >= 1", i+1, got.retryAfter)
					}
				}
			}
			if n := up.count(tenant); n != 5 {
				t.Fatalf("the upstream saw %d requests of %s, want exactly 5", n, tenant)
			}
		})
		t.Run(px.name+"/no token no access", func(t *testing.T) {
			tenant := "open_notoken_" + px.name
			got := through(t, px.notoken, tenant)
			if got.code/100 == 2 || up.count(tenant) != 0 {
				t.Fatalf("without quorate's token: %d %q, upstream saw %d; want no access", got.code, got.body, up.count(tenant))
			}
		})
	}

	// Stop n2 and n3: n1's shards lose their quorum and cannot decide.
	c.Stop(1)
	c.Stop(2)
	for _, px := range proxies {
		t.Run(px.name+"/no quorum", func(t *testing.T) {
			closed, open := "closed_"+px.name, "open_"+px.name
			await.Until(t, 30*time.Second, func() error {
				if got := through(t, px.addr, closed); got.code != 503 {
					return fmt.Errorf("FAIL_CLOSED tenant: %d %q, want 503 once the shards cannot decide", got.code, got.body)
				}
				return nil
			})
			if up.count(closed) != 0 {
				t.Fatalf("the upstream saw %d requests of a FAIL_CLOSED tenant", up.count(closed))
			}
			if got := through(t, px.addr, open); got.code != 200 || got.body != "upstream" || up.count(open) != 1 {
				t.Fatalf("FAIL_OPEN tenant: %d %q (upstream saw %d), want 200 from the upstream", got.code, got.body, up.count(open))
			}
		})
	}
	// The survivor says why.
	req, _ := http.NewRequest("GET", "http://"+c.Nodes[0].HTTP+"/v1/forward-auth", nil)
	req.Header.Set("Authorization", "Bearer "+c.Token("app"))
	req.Header.Set("X-Tenant-Id", "open_direct")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Rate-Limit-Reason") != "FAIL_OPEN" || resp.Header.Get("X-Policy-Id") != "fa_open" {
		t.Fatalf("direct forward-auth without quorum: %d, reason %q, policy %q; want 200 FAIL_OPEN fa_open",
			resp.StatusCode, resp.Header.Get("X-Rate-Limit-Reason"), resp.Header.Get("X-Policy-Id"))
	}
}
