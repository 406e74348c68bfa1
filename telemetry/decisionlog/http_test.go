package decisionlog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector is an HTTP endpoint that keeps what is posted to it and
// answers with status(i) for the i-th post (from 0).
type collector struct {
	*httptest.Server
	status func(i int) int

	mu    sync.Mutex
	posts []post // guarded by mu
}

type post struct {
	method, contentType, auth string
	body                      []byte
}

func newCollector(t *testing.T, status func(int) int) *collector {
	c := &collector{status: status}
	c.Server = httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(c.Close)
	return c
}

func (c *collector) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	i := len(c.posts)
	c.posts = append(c.posts, post{r.Method, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), body})
	c.mu.Unlock()
	if c.status != nil {
		w.WriteHeader(c.status(i))
	}
}

func (c *collector) got() []post {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slicesClone(c.posts)
}

func slicesClone(p []post) []post { return append([]post(nil), p...) }

// lineCounts is how many lines each post carried.
func lineCounts(posts []post) []int {
	var n []int
	for _, p := range posts {
		n = append(n, bytes.Count(p.body, []byte("\n")))
	}
	return n
}

// manualTicker is a ticker the test drives.
func manualTicker() (chan time.Time, func(time.Duration) (<-chan time.Time, func())) {
	ch := make(chan time.Time)
	return ch, func(time.Duration) (<-chan time.Time, func()) { return ch, func() {} }
}

func newHTTPLogger(t *testing.T, c HTTPConfig, reg prometheus.Registerer) *Logger {
	t.Helper()
	sink, err := NewHTTPSink(c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Sinks: []Sink{sink}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Batches end at MaxRecords; the rest is posted at Close; every post is
// NDJSON with the Authorization header.
func TestHTTPSinkBatches(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := newCollector(t, nil)
	_, ticker := manualTicker() // never ticks
	l := newHTTPLogger(t, HTTPConfig{URL: srv.URL + "/ingest", Authorization: "Bearer s3cret", MaxRecords: 3, NewTicker: ticker}, reg)
	for i := range 7 {
		l.Log(typical(i))
	}
	closeLogger(t, l)
	posts := srv.got()
	if got := lineCounts(posts); !equalInts(got, []int{3, 3, 1}) {
		t.Fatalf("posts carried %v lines, want [3 3 1]", got)
	}
	sink := &memSink{}
	total := 0
	for _, p := range posts {
		if p.method != "POST" || p.contentType != "application/x-ndjson" || p.auth != "Bearer s3cret" {
			t.Errorf("post %s, Content-Type %q, Authorization %q", p.method, p.contentType, p.auth)
		}
		_ = sink.Write(context.Background(), p.body)
		total += len(p.body)
	}
	for i, r := range sink.records(t) {
		if r.RequestID != typical(i).RequestID {
			t.Errorf("line %d is %s", i, r.RequestID)
		}
	}
	if got := metric(t, reg, "quorate_decision_log_bytes_total", "sink", "http"); got != float64(total) {
		t.Errorf("bytes_total{sink=http} %v, want %d", got, total)
	}
}

// A batch short of MaxRecords waits for a tick; MaxBytes ends a batch too.
func TestHTTPSinkTicksAndBytes(t *testing.T) {
	srv := newCollector(t, nil)
	tick, ticker := manualTicker()
	lineLen := len(typical(0).AppendJSON(nil)) + 1 // sample_rate 1 for 0, and the newline
	l := newHTTPLogger(t, HTTPConfig{URL: srv.URL, MaxBytes: 2*lineLen + 1, NewTicker: ticker}, nil)
	for i := range 5 {
		l.Log(typical(i))
	}
	waitFor(t, "two full batches", func() bool { return len(srv.got()) == 2 })
	waitFor(t, "the fifth line, after ticks", func() bool {
		select {
		case tick <- time.Now():
		default: // the sink is busy; tick again next time round
		}
		return len(srv.got()) == 3
	})
	if got := lineCounts(srv.got()); !equalInts(got, []int{2, 2, 1}) {
		t.Errorf("posts carried %v lines, want [2 2 1]", got)
	}
	closeLogger(t, l)
}

// A failed post is counted and its batch dropped, never retried.
func TestHTTPSinkFailure(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv := newCollector(t, func(i int) int {
		if i == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	_, ticker := manualTicker()
	l := newHTTPLogger(t, HTTPConfig{URL: srv.URL, MaxRecords: 2, NewTicker: ticker}, reg)
	for i := range 4 {
		l.Log(typical(i))
	}
	closeLogger(t, l)
	posts := srv.got()
	if len(posts) != 2 {
		t.Fatalf("%d posts, want 2 (no retry)", len(posts))
	}
	if got := metric(t, reg, "quorate_decision_log_sink_errors_total", "sink", "http"); got != 1 {
		t.Errorf("sink_errors_total{sink=http} %v, want 1", got)
	}
	if got := metric(t, reg, "quorate_decision_log_dropped_total", "where", "http"); got != 2 {
		t.Errorf("dropped_total{where=http} %v, want 2", got)
	}
	if got := metric(t, reg, "quorate_decision_log_bytes_total", "sink", "http"); got != float64(len(posts[1].body)) {
		t.Errorf("bytes_total{sink=http} %v, want %d", got, len(posts[1].body))
	}
}

// A collector that does not answer costs one Timeout per batch.
func TestHTTPSinkTimeout(t *testing.T) {
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server notices a client that hung up only once the body is
		// read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	l := newHTTPLogger(t, HTTPConfig{URL: srv.URL, MaxRecords: 1, Timeout: 50 * time.Millisecond}, reg)
	l.Log(typical(0))
	waitFor(t, "the post to time out", func() bool {
		return metric(t, reg, "quorate_decision_log_sink_errors_total", "sink", "http") == 1
	})
	closeLogger(t, l)
	if got := metric(t, reg, "quorate_decision_log_dropped_total", "where", "http"); got != 1 {
		t.Errorf("dropped_total{where=http} %v, want 1", got)
	}
}

func TestHTTPConfigErrors(t *testing.T) {
	for want, c := range map[string]HTTPConfig{
		`scheme "ftp"`:                {URL: "ftp://h/p"},
		"has no host":                 {URL: "http:///p"},
		"http sink URL: parse":        {URL: "http://h/%zz"},
		"batch_records -1":            {URL: "http://h", MaxRecords: -1},
		"batch_bytes 67108865":        {URL: "http://h", MaxBytes: 64<<20 + 1},
		"timeout -1s":                 {URL: "http://h", Timeout: -time.Second},
		"flush_interval 2h0m0s":       {URL: "http://h", Interval: 2 * time.Hour},
		`"https://u:xxxxx@" has no`:   {URL: "https://u:pw@"},
		`"ftp://u:xxxxx@h/p"`:         {URL: "ftp://u:pw@h/p"},
		`scheme "" is not http or ht`: {URL: "h/p"},
	} {
		_, err := NewHTTPSink(c)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v", want, err)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
