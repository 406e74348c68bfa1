package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the repository's top directory: the tests run in deploy/.
const repoRoot = ".."

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// quorateBinary builds the binary once with the Dockerfile's own build
// command (dockerBuildCommand), so every test runs what the image holds.
func quorateBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "quorate-deploy-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "quorate")
		binErr = buildLikeDockerfile(binPath)
	})
	if binErr != nil {
		t.Fatalf("building quorate as the Dockerfile does: %v", binErr)
	}
	return binPath
}

// buildLikeDockerfile runs the build stage's "go build" RUN line with its
// output path replaced by out.
func buildLikeDockerfile(out string) error {
	df, err := loadDockerfile()
	if err != nil {
		return err
	}
	run, target, err := dockerBuildCommand(df)
	if err != nil {
		return err
	}
	cmd := exec.Command("sh", "-c", strings.Replace(run, "-o "+target, "-o "+out, 1))
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "VERSION="+testVersion)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", run, err, b)
	}
	return nil
}

// testVersion is what the test build passes as the Dockerfile's VERSION.
const testVersion = "v0.0.0-deploy-test"

// runQuorate runs the binary with args and returns its stdout, failing the
// test on a non-zero exit.
func runQuorate(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(quorateBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("quorate %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// exitCode runs the binary and returns its exit status.
func exitCode(t *testing.T, args ...string) int {
	t.Helper()
	err := exec.Command(quorateBinary(t), args...).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

var helpFlag = regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`)

// agentFlags are the flags "quorate agent --help" lists, with their help
// lines (defaults included).
func agentFlags(t *testing.T) map[string]string {
	t.Helper()
	help := runQuorate(t, "agent", "--help")
	flags := map[string]string{}
	for _, line := range strings.Split(help, "\n") {
		if m := helpFlag.FindStringSubmatch(line); m != nil {
			flags[m[1]] = line
		}
	}
	if len(flags) < 20 || flags["node-id"] == "" {
		t.Fatalf("found only %d flags in quorate agent --help:\n%s", len(flags), help)
	}
	return flags
}

// checkAgentArgs checks an agent command line of the form "agent
// --flag=value ...": every flag exists in quorate agent --help, none is
// repeated, and it returns the values by flag name.
func checkAgentArgs(t *testing.T, where string, args []string, known map[string]string) map[string]string {
	t.Helper()
	if len(args) == 0 || args[0] != "agent" {
		t.Fatalf("%s: the command is %q; want it to start with agent", where, args)
	}
	vals := map[string]string{}
	for _, a := range args[1:] {
		name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !ok {
			t.Errorf("%s: argument %q: want --flag=value", where, a)
			continue
		}
		if _, exists := known[name]; !exists {
			t.Errorf("%s: --%s is not a flag of quorate agent", where, name)
		}
		if _, dup := vals[name]; dup {
			t.Errorf("%s: --%s given twice", where, name)
		}
		vals[name] = val
	}
	for _, req := range []string{"node-id", "data", "rpc", "peer", "http", "gossip", "join", "tls-cert", "tls-key", "tls-ca", "tokens-file", "gossip-keyring"} {
		if vals[req] == "" {
			t.Errorf("%s: --%s is missing", where, req)
		}
	}
	if _, ok := vals["leave-on-terminate"]; ok {
		t.Errorf("%s: --leave-on-terminate would move every replica away on each restart (deploy/README.md, Scaling down)", where)
	}
	return vals
}

// port is the port of host:port, failing the test if there is none.
func port(t *testing.T, where, hostport string) string {
	t.Helper()
	i := strings.LastIndexByte(hostport, ':')
	if i < 0 || i == len(hostport)-1 {
		t.Fatalf("%s: %q is not host:port", where, hostport)
	}
	return hostport[i+1:]
}

// host is the host of host:port.
func host(hostport string) string {
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 {
		return hostport[:i]
	}
	return hostport
}
