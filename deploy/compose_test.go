package deploy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// loadCompose loads docker-compose.yml as docker compose does: schema
// validation, anchors and merges resolved, references between services,
// volumes and networks checked.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	details, err := loader.LoadConfigFiles(ctx, []string{filepath.Join(root, "docker-compose.yml")}, root)
	if err != nil {
		t.Fatal(err)
	}
	details.Environment = types.Mapping{}
	p, err := loader.LoadWithContext(ctx, *details, func(o *loader.Options) { o.SetProjectName("quorate", true) })
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// composeNodes are the services that run an agent, by name.
func composeNodes(p *types.Project) map[string]types.ServiceConfig {
	nodes := map[string]types.ServiceConfig{}
	for name, s := range p.Services {
		if len(s.Command) > 0 && s.Command[0] == "agent" {
			nodes[name] = s
		}
	}
	return nodes
}

func TestComposeReferences(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		for dep := range s.DependsOn {
			if _, ok := p.Services[dep]; !ok {
				t.Errorf("%s depends on %s, which is no service", name, dep)
			}
		}
		for _, v := range s.Volumes {
			if _, ok := p.Volumes[v.Source]; v.Type == types.VolumeTypeVolume && !ok {
				t.Errorf("%s mounts volume %s, which is not declared", name, v.Source)
			}
		}
		for n := range s.Networks {
			if _, ok := p.Networks[n]; !ok {
				t.Errorf("%s joins network %s, which is not declared", name, n)
			}
		}
	}
	for v := range p.Volumes {
		used := false
		for _, s := range p.Services {
			used = used || slices.ContainsFunc(s.Volumes, func(m types.ServiceVolumeConfig) bool { return m.Source == v })
		}
		if !used {
			t.Errorf("volume %s is declared and never mounted", v)
		}
	}
}

func TestComposeNodes(t *testing.T) {
	p := loadCompose(t)
	nodes := composeNodes(p)
	if len(nodes) != 3 {
		t.Fatalf("%d agent services; want 3", len(nodes))
	}
	known := agentFlags(t)
	gen, genDir := credentialsService(t, p)
	dataVolumes := map[string]string{}
	gossip := map[string]string{}
	for name, s := range nodes {
		f := checkAgentArgs(t, name, s.Command, known)
		if f["node-id"] != name || s.Hostname != name || host(f["rpc"]) != name || host(f["peer"]) != name {
			t.Errorf("%s: node id %q, hostname %q, --rpc %q, --peer %q; want the service name throughout", name, f["node-id"], s.Hostname, f["rpc"], f["peer"])
		}
		if c, ok := s.DependsOn[gen]; !ok || c.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s: depends on %s with %+v; want condition service_completed_successfully", name, gen, c)
		}
		if s.User != "65532:65532" || !s.ReadOnly {
			t.Errorf("%s: user %q, read_only %v; want the image's non-root user on a read-only root", name, s.User, s.ReadOnly)
		}
		if s.Build == nil || s.Build.Target != "" {
			t.Errorf("%s: build %+v; want the Dockerfile's final stage", name, s.Build)
		}
		for _, flag := range []string{"tls-cert", "tls-key", "tls-ca", "tokens-file", "gossip-keyring"} {
			if !mountedReadOnly(s, genDir, f[flag]) {
				t.Errorf("%s: --%s %s is not in the credentials volume mounted read-only", name, flag, f[flag])
			}
		}
		dataVolumes[name] = mountAt(s, f["data"])
		if dataVolumes[name] == "" || dataVolumes[name] == genDir {
			t.Errorf("%s: no volume of its own mounted at --data %s", name, f["data"])
		}
		checkComposeNetwork(t, p, name, s, f)
		gossip[name] = f["gossip"]
		checkComposePorts(t, name, s, f)
		checkHealthcheck(t, name, s, f)
		if n, _ := strconv.Atoi(f["bootstrap-expect"]); n != len(nodes) {
			t.Errorf("%s: --bootstrap-expect %s; want %d, the nodes in the file", name, f["bootstrap-expect"], len(nodes))
		}
	}
	if v := uniq(dataVolumes); len(v) != len(nodes) {
		t.Errorf("data volumes %v: want one per node", dataVolumes)
	}
	for name, s := range nodes {
		var others []string
		for n, g := range gossip {
			if n != name {
				others = append(others, g)
			}
		}
		sort.Strings(others)
		join := strings.Split(checkAgentArgs(t, name, s.Command, known)["join"], ",")
		sort.Strings(join)
		if !slices.Equal(join, others) {
			t.Errorf("%s: --join %v; want the other nodes' gossip addresses %v", name, join, others)
		}
	}
}

// credentialsService finds the one-shot service that makes the credentials
// and the directory it makes them in, and checks what it makes is what the
// nodes read: it runs the service's command with the built binary.
func credentialsService(t *testing.T, p *types.Project) (string, string) {
	t.Helper()
	s, ok := p.Services["credentials"]
	if !ok {
		t.Fatal("no credentials service")
	}
	if s.Build == nil || s.Build.Target != "credentials" || !slices.ContainsFunc(mustStages(t), func(st stage) bool { return st.name == "credentials" }) {
		t.Errorf("credentials: build %+v; want the Dockerfile's credentials stage", s.Build)
	}
	if s.Restart != "no" {
		t.Errorf("credentials: restart %q; want \"no\" (one shot)", s.Restart)
	}
	dir := s.Command[0]
	if src := mountAt(s, dir); src == "" {
		t.Fatalf("credentials: writes to %s, where no volume is mounted", dir)
	}
	// Make the credentials the way the service does, in a temporary
	// directory standing for the volume.
	tmp := t.TempDir()
	makeCredentials(t, tmp, s.Command[1:]...)
	known := agentFlags(t)
	for name, n := range composeNodes(p) {
		f := checkAgentArgs(t, name, n.Command, known)
		for _, flag := range []string{"tls-cert", "tls-key", "tls-ca", "tokens-file", "gossip-keyring"} {
			rel, ok := strings.CutPrefix(f[flag], dir+"/")
			if _, err := os.Stat(filepath.Join(tmp, rel)); !ok || err != nil {
				t.Errorf("%s: --%s %s is not a file the credentials service makes", name, flag, f[flag])
			}
		}
		rel, _ := strings.CutPrefix(f["tls-cert"], dir+"/")
		if _, err := os.Stat(filepath.Join(tmp, rel)); err != nil {
			continue // reported above
		}
		hosts, id := certSANs(t, filepath.Join(tmp, rel))
		if id != f["node-id"] || !slices.Contains(hosts, host(f["rpc"])) || !slices.Contains(hosts, host(f["peer"])) || !slices.Contains(hosts, "127.0.0.1") {
			t.Errorf("%s: its certificate is for node %q with SANs %v; want node %s valid for its --rpc and --peer hosts and 127.0.0.1 (published ports)", name, id, hosts, f["node-id"])
		}
	}
	return "credentials", mountSource(s, dir)
}

func mustStages(t *testing.T) []stage {
	t.Helper()
	s, err := loadDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mountAt is the volume mounted at target, "" if none.
func mountAt(s types.ServiceConfig, target string) string { return mountSource(s, target) }

func mountSource(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Target == target {
			return v.Source
		}
	}
	return ""
}

// mountedReadOnly says whether file lies under a read-only mount of volume.
func mountedReadOnly(s types.ServiceConfig, volume, file string) bool {
	for _, v := range s.Volumes {
		if v.Source == volume && v.ReadOnly && strings.HasPrefix(file, v.Target+"/") {
			return true
		}
	}
	return false
}

func checkComposeNetwork(t *testing.T, p *types.Project, name string, s types.ServiceConfig, f map[string]string) {
	t.Helper()
	if len(s.Networks) != 1 {
		t.Errorf("%s: on %d networks; want one (its --rpc name must resolve to one address)", name, len(s.Networks))
	}
	for n, cfg := range s.Networks {
		ip := net.ParseIP(host(f["gossip"]))
		if cfg == nil || ip == nil || cfg.Ipv4Address != ip.String() {
			t.Errorf("%s: --gossip %s; want the node's fixed address on %s (memberlist advertises an IP)", name, f["gossip"], n)
			continue
		}
		for _, pool := range p.Networks[n].Ipam.Config {
			if _, subnet, err := net.ParseCIDR(pool.Subnet); err != nil || !subnet.Contains(ip) {
				t.Errorf("%s: %s is outside network %s's subnet %s", name, ip, n, pool.Subnet)
			}
		}
	}
}

func checkComposePorts(t *testing.T, name string, s types.ServiceConfig, f map[string]string) {
	t.Helper()
	exposed := exposedPorts(t)
	for _, pc := range s.Ports {
		target := strconv.Itoa(int(pc.Target))
		if target != port(t, "--rpc", f["rpc"]) && target != port(t, "--http", f["http"]) {
			t.Errorf("%s: publishes container port %s, which is neither --rpc nor --http", name, target)
		}
		if pc.HostIP != "127.0.0.1" {
			t.Errorf("%s: publishes %s on %q; want 127.0.0.1 (the HTTP port is plaintext)", name, target, pc.HostIP)
		}
		if !exposed[target+"/"+pc.Protocol] {
			t.Errorf("%s: publishes %s/%s, which the image does not EXPOSE", name, target, pc.Protocol)
		}
	}
}

// checkHealthcheck runs the service's healthcheck command, pointed at a
// stand-in /readyz, against a ready and an unready node.
func checkHealthcheck(t *testing.T, name string, s types.ServiceConfig, f map[string]string) {
	t.Helper()
	hc := s.HealthCheck
	if hc == nil || len(hc.Test) < 3 || hc.Test[0] != "CMD" || hc.Test[1] != "/quorate" {
		t.Fatalf("%s: healthcheck %+v; want [CMD /quorate probe ...] (distroless has no shell or curl)", name, hc)
	}
	args := slices.Clone(hc.Test[2:])
	i := slices.Index(args, "--url")
	if i < 0 || i+1 == len(args) {
		t.Fatalf("%s: healthcheck %v has no --url", name, hc.Test)
	}
	want := "http://127.0.0.1:" + port(t, "--http", f["http"]) + "/readyz"
	if args[i+1] != want {
		t.Errorf("%s: healthcheck probes %s; want %s (the node's --http)", name, args[i+1], want)
	}
	var unready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || unready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	args[i+1] = srv.URL + "/readyz"
	if code := exitCode(t, args...); code != 0 {
		t.Errorf("%s: healthcheck %v against a ready node: exit %d", name, args, code)
	}
	unready.Store(true)
	if code := exitCode(t, args...); code == 0 {
		t.Errorf("%s: healthcheck %v against an unready node: exit 0", name, args)
	}
}

func uniq(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}
