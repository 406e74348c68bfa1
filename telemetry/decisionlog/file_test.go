package decisionlog

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// lumberjack rotates by whole megabytes, so the test writes a few: with
// max 1 MB, 2.5 MB of lines make the file and two old ones, each at most
// 1 MB, holding every line once, in order.
func TestFileSinkRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "decisions.jsonl")
	n := writeMegabytes(t, FileConfig{Path: path, MaxSizeMB: 1, MaxFiles: 5}, 2.5)

	files := logFiles(t, dir)
	if len(files) != 3 || files[2] != "decisions.jsonl" {
		t.Fatalf("files %v, want two old ones and decisions.jsonl", files)
	}
	seen := 0
	for _, f := range files {
		p := filepath.Join(dir, f)
		if fi, err := os.Stat(p); err != nil || fi.Size() > 1<<20 {
			t.Errorf("%s: %v, size %d over 1 MiB", f, err, fi.Size())
		}
		seen = checkLines(t, openFile(t, p), seen)
	}
	if seen != n {
		t.Errorf("%d lines in the files, want %d", seen, n)
	}
}

// With max_files 1 and compress, three rotations leave one old file,
// gzipped (lumberjack does both in the background: the test waits).
func TestFileSinkKeepsAndCompresses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.jsonl")
	writeMegabytes(t, FileConfig{Path: path, MaxSizeMB: 1, MaxFiles: 1, Compress: true}, 3.5)
	var files []string
	waitFor(t, "one compressed old file", func() bool {
		files = logFiles(t, dir)
		return len(files) == 2 && strings.HasSuffix(files[0], ".jsonl.gz")
	})
	zr, err := gzip.NewReader(openFile(t, filepath.Join(dir, files[0])))
	if err != nil {
		t.Fatal(err)
	}
	if n := checkLines(t, zr, -1); n < 1000 {
		t.Errorf("the old file holds %d lines", n)
	}
}

func TestFileSinkConfigErrors(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for want, c := range map[string]FileConfig{
		"empty path":            {},
		`path "` + notDir:       {Path: filepath.Join(notDir, "d.jsonl")},
		"max_size_mb -1":        {Path: "x", MaxSizeMB: -1},
		"max_files 10001":       {Path: "x", MaxFiles: 10001},
		"max_age_days -2 is":    {Path: "x", MaxAgeDays: -2},
		"max_size_mb 1048577 i": {Path: "x", MaxSizeMB: 1<<20 + 1},
	} {
		_, err := NewFileSink(c)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

// writeMegabytes logs typical records until mb megabytes of lines and
// closes the logger; it returns how many.
func writeMegabytes(t *testing.T, c FileConfig, mb float64) int {
	t.Helper()
	sink, err := NewFileSink(c)
	if err != nil {
		t.Fatal(err)
	}
	n := int(mb * (1 << 20) / float64(len(typical(0).AppendJSON(nil))+20))
	l, err := New(Config{Sinks: []Sink{sink}, Buffer: n})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		l.Log(typical(i))
	}
	closeLogger(t, l)
	return n
}

// logFiles lists dir's files, oldest first, the live file last.
func logFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.SortFunc(names, func(a, b string) int {
		// decisions-<time>.jsonl sorts by time; decisions.jsonl is live.
		return strings.Compare(strings.Replace(a, ".", "~", 1), strings.Replace(b, ".", "~", 1))
	})
	return names
}

func openFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// checkLines decodes every line of r; with next >= 0 the request ids must
// count on from next. It returns the count reached (or of lines).
func checkLines(t *testing.T, r io.Reader, next int) int {
	t.Helper()
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if next >= 0 {
			if want := typical(next).RequestID; rec.RequestID != want {
				t.Fatalf("line has %s, want %s", rec.RequestID, want)
			}
			next++
		}
		n++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if next >= 0 {
		return next
	}
	return n
}
