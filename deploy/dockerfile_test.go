package deploy

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line  int
	cmd   string   // upper case: FROM, RUN, ...
	flags []string // leading --flag=value words
	args  string   // the rest, as written
	exec  []string // args in exec (JSON) form, if it is
}

// stage is one FROM and the instructions under it.
type stage struct {
	image, name string
	ins         []instruction
}

var dockerfileCmds = []string{"ADD", "ARG", "CMD", "COPY", "ENTRYPOINT", "ENV", "EXPOSE", "FROM", "HEALTHCHECK",
	"LABEL", "ONBUILD", "RUN", "SHELL", "STOPSIGNAL", "USER", "VOLUME", "WORKDIR"}

// parseDockerfile reads src strictly: every instruction must be a known one,
// exec forms valid JSON, and the first one FROM (or ARG).
func parseDockerfile(src string) ([]stage, error) {
	var stages []stage
	sc := bufio.NewScanner(strings.NewReader(src))
	n, start := 0, 0
	var cur strings.Builder
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if body, cont := strings.CutSuffix(line, `\`); cont {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(line)
		in, err := parseInstruction(start, cur.String())
		cur.Reset()
		if err != nil {
			return nil, err
		}
		switch {
		case in.cmd == "FROM":
			s := stage{image: strings.Fields(in.args)[0]}
			if f := strings.Fields(in.args); len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			} else if len(f) != 1 {
				return nil, fmt.Errorf("line %d: FROM %q: want IMAGE [AS NAME]", in.line, in.args)
			}
			stages = append(stages, s)
		case len(stages) == 0 && in.cmd != "ARG":
			return nil, fmt.Errorf("line %d: %s before the first FROM", in.line, in.cmd)
		case len(stages) > 0:
			stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
		}
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("line %d: the file ends in a continuation", start)
	}
	return stages, sc.Err()
}

func parseInstruction(line int, text string) (instruction, error) {
	cmd, rest, _ := strings.Cut(text, " ")
	in := instruction{line: line, cmd: strings.ToUpper(cmd)}
	if !slices.Contains(dockerfileCmds, in.cmd) {
		return in, fmt.Errorf("line %d: unknown instruction %q", line, cmd)
	}
	rest = strings.TrimSpace(rest)
	for strings.HasPrefix(rest, "--") {
		flag, after, _ := strings.Cut(rest, " ")
		in.flags = append(in.flags, flag)
		rest = strings.TrimSpace(after)
	}
	if rest == "" {
		return in, fmt.Errorf("line %d: %s without arguments", line, in.cmd)
	}
	in.args = rest
	if strings.HasPrefix(rest, "[") {
		if err := json.Unmarshal([]byte(rest), &in.exec); err != nil {
			return in, fmt.Errorf("line %d: %s %s: not a JSON array of strings: %v", line, in.cmd, rest, err)
		}
	}
	return in, nil
}

func loadDockerfile() ([]stage, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		return nil, err
	}
	return parseDockerfile(string(b))
}

// dockerBuildCommand is the first stage's RUN line that builds the binary,
// and the path it writes (-o).
func dockerBuildCommand(stages []stage) (run, out string, err error) {
	if len(stages) == 0 {
		return "", "", fmt.Errorf("Dockerfile: no stage")
	}
	for _, in := range stages[0].ins {
		if in.cmd != "RUN" || !strings.Contains(in.args, "go build") {
			continue
		}
		f := strings.Fields(in.args)
		i := slices.Index(f, "-o")
		if i < 0 || i+1 == len(f) {
			return "", "", fmt.Errorf("Dockerfile line %d: go build without -o", in.line)
		}
		return in.args, f[i+1], nil
	}
	return "", "", fmt.Errorf("Dockerfile: the build stage has no RUN ... go build")
}

func finalStage(t *testing.T) stage {
	t.Helper()
	stages, err := loadDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	return stages[len(stages)-1]
}

// last is stage s's last cmd instruction.
func (s stage) last(cmd string) (instruction, bool) {
	for i := len(s.ins) - 1; i >= 0; i-- {
		if s.ins[i].cmd == cmd {
			return s.ins[i], true
		}
	}
	return instruction{}, false
}

func TestDockerfile(t *testing.T) {
	stages, err := loadDockerfile()
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stage(s); want a multi-stage build", len(stages))
	}
	if img := stages[0].image; !strings.HasPrefix(img, "golang:1.26") {
		t.Errorf("the build stage is FROM %s; want golang:1.26", img)
	}
	final := stages[len(stages)-1]
	if final.image != "gcr.io/distroless/static-debian12:nonroot" && final.image != "scratch" {
		t.Errorf("the final stage is FROM %s; want distroless/static or scratch", final.image)
	}
	names := map[string]bool{}
	for _, s := range stages {
		for _, in := range s.ins {
			checkCopySource(t, in, names)
		}
		if s.name != "" {
			names[s.name] = true
		}
		// Any stage that runs something as its entry point runs it as non-root.
		if _, ok := s.last("ENTRYPOINT"); ok {
			u, ok := s.last("USER")
			if !ok || u.args == "root" || u.args == "0" || strings.HasPrefix(u.args, "0:") {
				t.Errorf("stage FROM %s runs its ENTRYPOINT as %q; want a non-root USER", s.image, u.args)
			}
		}
	}
	run, _, err := dockerBuildCommand(stages)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/quorate"} {
		if !strings.Contains(run, want) {
			t.Errorf("the build command %q lacks %s", run, want)
		}
	}
	ep, ok := final.last("ENTRYPOINT")
	if !ok || len(ep.exec) == 0 {
		t.Fatalf("the final stage's ENTRYPOINT is %q; want the binary in exec form", ep.args)
	}
	if !copiesTo(final, ep.exec[0]) {
		t.Errorf("the ENTRYPOINT %s is not a file the final stage copies in", ep.exec[0])
	}
	if v, _ := final.last("VOLUME"); !strings.Contains(v.args, "/data") {
		t.Errorf("the final stage's VOLUME is %q; want /data", v.args)
	}
}

// checkCopySource: no ADD of a URL or a git repository, COPY --from names an
// earlier stage, and a COPY from the context names a file that exists and
// that .dockerignore lets through.
func checkCopySource(t *testing.T, in instruction, stages map[string]bool) {
	t.Helper()
	if in.cmd == "ADD" && (strings.Contains(in.args, "://") || strings.Contains(in.args, "git@")) {
		t.Errorf("line %d: ADD %s fetches from the network; download in a RUN with a checksum, or COPY", in.line, in.args)
		return
	}
	if in.cmd != "COPY" && in.cmd != "ADD" {
		return
	}
	for _, f := range in.flags {
		if from, ok := strings.CutPrefix(f, "--from="); ok {
			if !stages[from] {
				t.Errorf("line %d: COPY --from=%s names no earlier stage", in.line, from)
			}
			return
		}
	}
	srcs := strings.Fields(in.args)
	for _, src := range srcs[:len(srcs)-1] {
		if src == "." {
			continue
		}
		if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
			t.Errorf("line %d: COPY %s: %v", in.line, src, err)
		}
		if ignored(t, src) {
			t.Errorf("line %d: COPY %s, which .dockerignore excludes", in.line, src)
		}
	}
}

func copiesTo(s stage, path string) bool {
	for _, in := range s.ins {
		if f := strings.Fields(in.args); in.cmd == "COPY" && f[len(f)-1] == path {
			return true
		}
	}
	return false
}

// ignored says whether .dockerignore keeps path (relative to the
// repository) out of the build context, as Docker reads it.
func ignored(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	skip, err := pm.MatchesOrParentMatches(filepath.ToSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return skip
}

func TestDockerignore(t *testing.T) {
	for _, p := range []string{".git/config", "bin/quorate", "data/n1/wal/0001", "bench/results/latest/report.md", "cmd/quorate/quorate.test"} {
		if !ignored(t, p) {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}
	// What the build needs: the module files and every source file of the
	// binary (the Dockerfile builds ./cmd/quorate).
	need := []string{"go.mod", "go.sum", "deploy/credentials.sh"}
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() && (d.Name() == ".git" || d.Name() == "bin" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(repoRoot, p)
			need = append(need, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range need {
		if ignored(t, p) {
			t.Errorf(".dockerignore keeps %s, which the build needs, out of the build context", p)
		}
	}
}

// TestStaticBinary builds the binary with the Dockerfile's command and checks
// it runs on distroless/static: no ELF interpreter, no shared library.
func TestStaticBinary(t *testing.T) {
	bin := quorateBinary(t)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: it is dynamically linked (CGO?)", bin)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", bin, libs)
	}
	if out := runQuorate(t, "version"); !strings.Contains(out, testVersion) {
		t.Errorf("quorate version = %q; want the VERSION the build passed, %s", out, testVersion)
	}
}

// TestDockerfileExposesAgentPorts: the image exposes the ports the agent
// serves by default, gossip on TCP and UDP.
func TestDockerfileExposesAgentPorts(t *testing.T) {
	exposed := exposedPorts(t)
	flags := agentFlags(t)
	for _, f := range []string{"rpc", "http", "peer", "gossip"} {
		def := defaultOf(t, flags[f])
		want := []string{port(t, "--"+f, def) + "/tcp"}
		if f == "gossip" {
			want = append(want, port(t, "--"+f, def)+"/udp")
		}
		for _, w := range want {
			if !exposed[w] {
				t.Errorf("the image does not EXPOSE %s (--%s defaults to %s)", w, f, def)
			}
		}
	}
}

func exposedPorts(t *testing.T) map[string]bool {
	t.Helper()
	exposed := map[string]bool{}
	for _, in := range finalStage(t).ins {
		if in.cmd != "EXPOSE" {
			continue
		}
		for _, p := range strings.Fields(in.args) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			exposed[p] = true
		}
	}
	return exposed
}

// defaultOf is the (default "...") of a flag's help line.
func defaultOf(t *testing.T, help string) string {
	t.Helper()
	_, after, ok := strings.Cut(help, `(default "`)
	if !ok {
		t.Fatalf("no default in %q", help)
	}
	def, _, _ := strings.Cut(after, `"`)
	return def
}

func TestParseDockerfileRejects(t *testing.T) {
	for _, src := range []string{
		"RUN echo before any stage\n",
		"FROM a\nFROBNICATE x\n",
		"FROM a\nENTRYPOINT [\"/x\"\n",
		"FROM a\nRUN echo \\\n",
		"FROM a b c d\n",
	} {
		if _, err := parseDockerfile(src); err == nil {
			t.Errorf("parseDockerfile(%q) = nil error", src)
		}
	}
}
