package deploy

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const kubeDir = repoRoot + "/deploy/kubernetes"

// kubeObjects are the manifests, decoded strictly with the Kubernetes API
// types: an unknown or misspelt field fails the test.
type kubeObjects struct {
	services []corev1.Service
	sts      []appsv1.StatefulSet
	pdbs     []policyv1.PodDisruptionBudget
}

func loadKube(t *testing.T) kubeObjects {
	t.Helper()
	var objs kubeObjects
	for _, file := range kustomizeResources(t) {
		b, err := os.ReadFile(filepath.Join(kubeDir, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitYAML(b) {
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s document %d: %v", file, i, err)
			}
			var err error
			switch tm.APIVersion + " " + tm.Kind {
			case "v1 Service":
				var o corev1.Service
				err = yaml.UnmarshalStrict(doc, &o)
				objs.services = append(objs.services, o)
			case "apps/v1 StatefulSet":
				var o appsv1.StatefulSet
				err = yaml.UnmarshalStrict(doc, &o)
				objs.sts = append(objs.sts, o)
			case "policy/v1 PodDisruptionBudget":
				var o policyv1.PodDisruptionBudget
				err = yaml.UnmarshalStrict(doc, &o)
				objs.pdbs = append(objs.pdbs, o)
			default:
				t.Fatalf("%s document %d: %s %s is not a kind this test knows", file, i, tm.APIVersion, tm.Kind)
			}
			if err != nil {
				t.Fatalf("%s document %d (%s): %v", file, i, tm.Kind, err)
			}
		}
	}
	if len(objs.sts) != 1 || len(objs.pdbs) != 1 || len(objs.services) != 2 {
		t.Fatalf("%d StatefulSets, %d PDBs, %d Services; want 1, 1 and 2", len(objs.sts), len(objs.pdbs), len(objs.services))
	}
	return objs
}

// splitYAML splits a multi-document stream on its "---" lines.
func splitYAML(b []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		if len(bytes.TrimSpace(stripComments(cur.Bytes()))) > 0 {
			docs = append(docs, slices.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.TrimRight(sc.Text(), " ") == "---" {
			flush()
			continue
		}
		cur.WriteString(sc.Text() + "\n")
	}
	flush()
	return docs
}

var commentLine = regexp.MustCompile(`(?m)^\s*#.*$`)

func stripComments(b []byte) []byte { return commentLine.ReplaceAll(b, nil) }

// kustomizeResources reads kustomization.yaml strictly and checks it lists
// every manifest in the directory.
func kustomizeResources(t *testing.T) []string {
	t.Helper()
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(kubeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &k); err != nil || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %v (kind %q)", err, k.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(kubeDir, "*.yaml"))
	var want []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			want = append(want, filepath.Base(f))
		}
	}
	got := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v; the directory has %v", got, want)
	}
	return k.Resources
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

func TestKubernetesWiring(t *testing.T) {
	objs := loadKube(t)
	sts := objs.sts[0]
	pod := sts.Spec.Template
	if !selects(t, sts.Spec.Selector, pod.Labels) {
		t.Errorf("the StatefulSet's selector %v does not match its pods' labels %v", sts.Spec.Selector, pod.Labels)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v; want 3", sts.Spec.Replicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q; want Parallel: no pod is ready before --bootstrap-expect have met", sts.Spec.PodManagementPolicy)
	}
	var headless *corev1.Service
	for i, svc := range objs.services {
		if svc.Spec.Selector == nil || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
			t.Errorf("Service %s selects %v, not the pods %v", svc.Name, svc.Spec.Selector, pod.Labels)
		}
		checkServicePorts(t, svc, pod.Spec.Containers[0])
		if svc.Name == sts.Spec.ServiceName {
			headless = &objs.services[i]
		}
	}
	if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %q: want a headless Service publishing not-ready pods (they form the cluster before any is ready), got %+v", sts.Spec.ServiceName, headless)
	}
	pdb := objs.pdbs[0]
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || !selects(t, pdb.Spec.Selector, pod.Labels) {
		t.Errorf("PDB: maxUnavailable %v, selector %v; want 1, selecting the pods %v", pdb.Spec.MaxUnavailable, pdb.Spec.Selector, pod.Labels)
	}
	if r := sts.Spec.PersistentVolumeClaimRetentionPolicy; r == nil || r.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Errorf("persistentVolumeClaimRetentionPolicy %+v; want whenScaled: Delete (a scaled-up ordinal must start empty to join)", r)
	}
	checkAntiAffinity(t, pod)
}

func checkServicePorts(t *testing.T, svc corev1.Service, c corev1.Container) {
	t.Helper()
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		found := slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			cproto := cp.Protocol
			if cproto == "" {
				cproto = corev1.ProtocolTCP
			}
			return cproto == proto && (sp.TargetPort.StrVal == cp.Name || sp.TargetPort.IntVal == cp.ContainerPort)
		})
		if !found {
			t.Errorf("Service %s port %s targets %s/%s, which the container does not serve", svc.Name, sp.Name, sp.TargetPort.String(), proto)
		}
	}
}

func checkAntiAffinity(t *testing.T, pod corev1.PodTemplateSpec) {
	t.Helper()
	a := pod.Spec.Affinity
	if a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Fatal("no required podAntiAffinity: two replicas of a shard could share a machine")
	}
	term := a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0]
	if term.TopologyKey != "kubernetes.io/hostname" || !selects(t, term.LabelSelector, pod.Labels) {
		t.Errorf("podAntiAffinity %+v: want the pods' own labels per kubernetes.io/hostname", term)
	}
}

func TestKubernetesContainer(t *testing.T) {
	sts := loadKube(t).sts[0]
	spec := sts.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers; want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	f := checkAgentArgs(t, "StatefulSet", c.Args, agentFlags(t))
	checkEnvRefs(t, c)
	httpPort, _ := strconv.Atoi(port(t, "--http", f["http"]))
	for name, p := range map[string]*corev1.Probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
		want := map[string]string{"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}[name]
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want {
			t.Errorf("%s %+v: want GET %s", name, p, want)
			continue
		}
		if got := containerPort(c, p.HTTPGet.Port); got != int32(httpPort) {
			t.Errorf("%s targets port %s (%d); the agent serves HTTP on %d (--http %s)", name, p.HTTPGet.Port.String(), got, httpPort, f["http"])
		}
	}
	exposed := exposedPorts(t)
	for _, cp := range c.Ports {
		proto := strings.ToLower(string(cp.Protocol))
		if proto == "" {
			proto = "tcp"
		}
		if !exposed[strconv.Itoa(int(cp.ContainerPort))+"/"+proto] {
			t.Errorf("container port %s %d/%s is not EXPOSEd by the image", cp.Name, cp.ContainerPort, proto)
		}
	}
	for flag, name := range map[string]string{"rpc": "grpc", "peer": "peer", "gossip": "gossip-udp", "http": "http"} {
		if strconv.Itoa(int(containerPort(c, intstr.FromString(name)))) != port(t, "--"+flag, f[flag]) {
			t.Errorf("container port %s is not --%s's port (%s)", name, flag, f[flag])
		}
	}
	checkSecurity(t, spec, c)
	checkMounts(t, sts, c, f)
	if r := c.Resources; r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
		t.Errorf("resources %+v: want cpu and memory requests and a memory limit", r)
	}
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		t.Error("a preStop hook runs on every rolling restart too; leaving is an operator's step before scaling down (deploy/README.md)")
	}
	if n, _ := strconv.Atoi(f["bootstrap-expect"]); n != int(*sts.Spec.Replicas) {
		t.Errorf("--bootstrap-expect %s; want the replicas, %d", f["bootstrap-expect"], *sts.Spec.Replicas)
	}
}

// containerPort resolves a probe's or Service's port (a number or a name).
func containerPort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

var envRef = regexp.MustCompile(`\$\(([A-Z_]+)\)`)

// checkEnvRefs: every $(VAR) in the args is an env var of the container
// (Kubernetes leaves an unknown one as it is, silently).
func checkEnvRefs(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, a := range c.Args {
		for _, m := range envRef.FindAllStringSubmatch(a, -1) {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == m[1] }) {
				t.Errorf("argument %q uses $(%s), which is no env var of the container", a, m[1])
			}
		}
	}
}

func checkSecurity(t *testing.T, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	user, _ := finalStage(t).last("USER")
	uid, _, _ := strings.Cut(user.args, ":")
	psc, sc := spec.SecurityContext, c.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || strconv.Itoa(int(*psc.RunAsUser)) != uid || psc.FSGroup == nil {
		t.Errorf("pod securityContext %+v: want runAsNonRoot, runAsUser %s (the image's USER) and an fsGroup for the volumes", psc, uid)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v: want readOnlyRootFilesystem and no privilege escalation", sc)
	}
}

// checkMounts: --data is the claim template's volume; the credential
// flags name files of the Secret's read-only mount.
func checkMounts(t *testing.T, sts appsv1.StatefulSet, c corev1.Container, f map[string]string) {
	t.Helper()
	mount := func(path string) (corev1.VolumeMount, bool) {
		for _, m := range c.VolumeMounts {
			if path == m.MountPath || strings.HasPrefix(path, m.MountPath+"/") {
				return m, true
			}
		}
		return corev1.VolumeMount{}, false
	}
	if m, ok := mount(f["data"]); !ok || len(sts.Spec.VolumeClaimTemplates) != 1 || m.Name != sts.Spec.VolumeClaimTemplates[0].Name {
		t.Errorf("--data %s is not on the volumeClaimTemplate's volume", f["data"])
	}
	for _, flag := range []string{"tls-cert", "tls-key", "tls-ca", "tokens-file", "gossip-keyring"} {
		m, ok := mount(f[flag])
		if !ok || !m.ReadOnly {
			t.Errorf("--%s %s is not on a read-only mount", flag, f[flag])
			continue
		}
		if secret := secretOf(sts, m.Name); secret == "" {
			t.Errorf("--%s %s: volume %s is not a Secret", flag, f[flag], m.Name)
		}
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		// Keys read-only, by the user and the fsGroup only. (YAML reads
		// 0440 as octal; 440 would be decimal, mode 0670.)
		if v.Secret != nil && (v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&^0o440 != 0) {
			t.Errorf("Secret volume %s: defaultMode %s; want read-only for the user and group (0440)", v.Name, octal(v.Secret.DefaultMode))
		}
	}
}

func octal(m *int32) string {
	if m == nil {
		return "unset"
	}
	return "0" + strconv.FormatInt(int64(*m), 8)
}

func secretOf(sts appsv1.StatefulSet, volume string) string {
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == volume && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// TestKubernetesSecret runs make-secret.sh with the built binary and a
// stand-in kubectl, and checks the Secret it creates is the one the pods
// mount, holding every file their flags name, for each pod, and nothing a
// node must not hold (the CA key, plain tokens).
func TestKubernetesSecret(t *testing.T) {
	const ns = "quorate-test"
	sts := loadKube(t).sts[0]
	c := sts.Spec.Template.Spec.Containers[0]
	known := agentFlags(t)
	secrets, dir := runMakeSecret(t, ns, int(*sts.Spec.Replicas))
	env := map[string]string{"POD_NAMESPACE": ns, "POD_IP": "192.0.2.10"}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	for i := range int(*sts.Spec.Replicas) {
		env["POD_NAME"] = sts.Name + "-" + strconv.Itoa(i)
		args := slices.Clone(c.Args)
		for j := range args {
			args[j] = envRef.ReplaceAllStringFunc(args[j], func(ref string) string { return env[ref[2:len(ref)-1]] })
		}
		f := checkAgentArgs(t, env["POD_NAME"], args, known)
		for _, flag := range []string{"tls-cert", "tls-key", "tls-ca", "tokens-file", "gossip-keyring"} {
			m := mountFor(c, f[flag])
			name := secretOf(sts, m.Name)
			key := strings.TrimPrefix(f[flag], m.MountPath+"/")
			if !slices.Contains(secrets[name], key) {
				t.Errorf("%s: --%s %s: Secret %q (from make-secret.sh) has no key %s; it has %v", env["POD_NAME"], flag, f[flag], name, key, secrets[name])
			}
		}
		want := env["POD_NAME"] + "." + sts.Spec.ServiceName + "." + ns + ".svc." + env["CLUSTER_DOMAIN"]
		if host(f["rpc"]) != want || host(f["peer"]) != want {
			t.Errorf("%s: --rpc %s, --peer %s; want its stable name %s", env["POD_NAME"], f["rpc"], f["peer"], want)
		}
		if ip := net.ParseIP(host(f["gossip"])); ip == nil {
			t.Errorf("%s: --gossip %s: memberlist advertises an IP address", env["POD_NAME"], f["gossip"])
		}
		hosts, id := certSANs(t, filepath.Join(dir, env["POD_NAME"]+".crt"))
		for _, h := range []string{want, "quorate." + ns + ".svc", "quorate." + ns + ".svc." + env["CLUSTER_DOMAIN"]} {
			if id != env["POD_NAME"] || !slices.Contains(hosts, h) {
				t.Errorf("%s's certificate (node %q, SANs %v) is not valid for %s", env["POD_NAME"], id, hosts, h)
			}
		}
		for _, seed := range strings.Split(f["join"], ",") {
			if !strings.HasSuffix(host(seed), "."+sts.Spec.ServiceName+"."+ns+".svc."+env["CLUSTER_DOMAIN"]) || port(t, "--join", seed) != port(t, "--gossip", f["gossip"]) {
				t.Errorf("%s: --join seed %s is not a pod's gossip port under the headless Service", env["POD_NAME"], seed)
			}
		}
	}
	for name, keys := range secrets {
		for _, k := range keys {
			if k == "ca.key" || strings.HasSuffix(k, ".token") && name == "quorate-credentials" {
				t.Errorf("Secret %s holds %s, which no node needs", name, k)
			}
		}
	}
}

func mountFor(c corev1.Container, path string) corev1.VolumeMount {
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, m.MountPath+"/") {
			return m
		}
	}
	return corev1.VolumeMount{}
}

// runMakeSecret runs make-secret.sh with a kubectl that records its
// arguments, and returns the keys of each Secret it was asked to create and
// the credentials directory.
func runMakeSecret(t *testing.T, ns string, nodes int) (map[string][]string, string) {
	t.Helper()
	tmp := t.TempDir()
	log := filepath.Join(tmp, "kubectl.log")
	kubectl := filepath.Join(tmp, "kubectl")
	script := "#!/bin/sh\necho CALL >>" + log + "\nfor a in \"$@\"; do echo \"$a\" >>" + log + "; done\n"
	if err := os.WriteFile(kubectl, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "creds")
	cmd := exec.Command("sh", filepath.Join(kubeDir, "make-secret.sh"), ns, strconv.Itoa(nodes), dir)
	cmd.Env = append(os.Environ(), "QUORATE="+quorateBinary(t), "KUBECTL="+kubectl)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make-secret.sh: %v\n%s", err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string][]string{}
	for _, call := range strings.Split(string(b), "CALL\n")[1:] {
		args := strings.Fields(call)
		if len(args) < 4 || !slices.Equal(args[:3], []string{"create", "secret", "generic"}) || !slices.Contains(args, ns) {
			t.Fatalf("make-secret.sh ran kubectl %v; want create secret generic NAME --namespace %s", args, ns)
		}
		for _, a := range args[4:] {
			if src, ok := strings.CutPrefix(a, "--from-file="); ok {
				key, file, named := strings.Cut(src, "=")
				if !named {
					key, file = filepath.Base(src), src
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("kubectl %v: %v", args[:4], err)
				}
				secrets[args[3]] = append(secrets[args[3]], key)
			}
		}
	}
	return secrets, dir
}
