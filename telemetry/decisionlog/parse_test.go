package decisionlog

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseSink(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("DECISIONLOG_TEST_AUTH", "Bearer from-env")
	authFile := filepath.Join(dir, "token")
	if err := os.WriteFile(authFile, []byte("Bearer from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := ParseSink("stdout"); err != nil || s.Name() != "stdout" || s.(*WriterSink).w != os.Stdout {
		t.Errorf("stdout: %v %v", s, err)
	}

	path := filepath.Join(dir, "logs", "d.jsonl")
	s, err := ParseSink("file:" + path + "?max_size_mb=7&max_files=3&max_age_days=30&compress=true")
	if err != nil {
		t.Fatal(err)
	}
	lj := s.(*FileSink).lj
	if lj.Filename != path || lj.MaxSize != 7 || lj.MaxBackups != 3 || lj.MaxAge != 30 || !lj.Compress {
		t.Errorf("file sink %+v", lj)
	}
	s, err = ParseSink("file://" + path) // a file URL with an empty host
	if err != nil || s.(*FileSink).lj.Filename != path || s.(*FileSink).lj.MaxSize != DefaultFileMaxSizeMB || s.(*FileSink).lj.MaxBackups != DefaultFileMaxFiles {
		t.Errorf("file URL: %v %v", s, err)
	}

	for spec, want := range map[string]HTTPConfig{
		"http://127.0.0.1:9000/ingest": {URL: "http://127.0.0.1:9000/ingest", MaxRecords: DefaultHTTPMaxRecords,
			MaxBytes: DefaultHTTPMaxBytes, Interval: DefaultHTTPInterval, Timeout: DefaultHTTPTimeout},
		"https://c.example/in?stream=q#batch_records=10&batch_bytes=4096&flush_interval=250ms&timeout=2s&auth_env=DECISIONLOG_TEST_AUTH": {
			URL: "https://c.example/in?stream=q", Authorization: "Bearer from-env", MaxRecords: 10, MaxBytes: 4096,
			Interval: 250 * time.Millisecond, Timeout: 2 * time.Second},
		"http://c/in#auth_file=" + authFile: {URL: "http://c/in", Authorization: "Bearer from-file", MaxRecords: DefaultHTTPMaxRecords,
			MaxBytes: DefaultHTTPMaxBytes, Interval: DefaultHTTPInterval, Timeout: DefaultHTTPTimeout},
	} {
		s, err := ParseSink(spec)
		if err != nil {
			t.Errorf("%s: %v", spec, err)
			continue
		}
		if got := s.(*HTTPSink).c; !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", spec, got, want)
		}
	}
}

// Each bad spec's error names the spec and the bad part.
func TestParseSinkErrors(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "f")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]string{
		"":                                      "empty spec",
		"stderr":                                "unknown kind of sink",
		"kafka://b:9092/t":                      "unknown kind of sink",
		"file:":                                 "no path after file:",
		"file:/x/d.jsonl?max_size_mb=abc":       `max_size_mb "abc" is not a whole number`,
		"file:/x/d.jsonl?max_files=0":           `max_files "0" is not a whole number above 0`,
		"file:/x/d.jsonl?max_size_mb=1&bogus=1": `unknown option "bogus" (known: max_size_mb, max_files, max_age_days, compress)`,
		"file:/x/d.jsonl?compress=maybe":        `compress "maybe" is not true or false`,
		"file:/x/d.jsonl?max_files=1&max_files=2": "option max_files given 2 times",
		"file:/x/d.jsonl?max_files=%zz":           "options",
		"file://host/x/d.jsonl":                   `names host "host"`,
		"file:" + notDir + "/d.jsonl":             "file sink path",
		"http://":                                 "has no host",
		"http://h/p#timeout=soon":                 `timeout "soon" is not a duration`,
		"http://h/p#flush_interval=-1s":           `flush_interval "-1s" is not a duration above 0`,
		"http://h/p#batch_records=x":              `batch_records "x"`,
		"http://h/p#retries=3":                    `unknown option "retries"`,
		"http://h/p#auth_env=DECISIONLOG_UNSET":   `environment variable "DECISIONLOG_UNSET" is empty or unset`,
		"http://h/p#auth_file=/nonexistent/tok":   "auth_file: open /nonexistent/tok",
		"http://h/p#auth_env=A&auth_file=B":       "auth_env and auth_file are both given",
		"https://u:secret@h/p#timeout=x":          `sink "https://u:xxxxx@h/p#timeout=x"`,
	} {
		_, err := ParseSink(spec)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want it to say %q", spec, err, want)
			continue
		}
		if !strings.Contains(err.Error(), `sink "`) {
			t.Errorf("%q: %v does not name the spec", spec, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%q: %v shows the password", spec, err)
		}
	}
}
