package decisionlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// HTTPConfig is a collector that takes POSTs of NDJSON batches
// (Content-Type application/x-ndjson). A batch is sent when it holds
// MaxRecords lines or MaxBytes bytes, or at the next tick of Interval. A
// post that fails (an error, a status other than 2xx, past Timeout) is
// counted and its batch dropped: never retried, so a dead collector costs
// one timeout per batch and no memory.
type HTTPConfig struct {
	URL string // http:// or https://
	// Authorization is the header's value ("Bearer ..."); empty sends none.
	Authorization string
	MaxRecords    int           // default 500
	MaxBytes      int           // default 1 MiB
	Interval      time.Duration // default 1s
	Timeout       time.Duration // per post; default 5s
	// Client sends the posts; nil is a client of the sink's own.
	Client *http.Client
	// NewTicker makes Interval's ticker; nil is time.NewTicker.
	NewTicker func(time.Duration) (<-chan time.Time, func())
}

// Defaults and limits of an HTTPConfig.
const (
	DefaultHTTPMaxRecords = 500
	DefaultHTTPMaxBytes   = 1 << 20
	DefaultHTTPInterval   = time.Second
	DefaultHTTPTimeout    = 5 * time.Second
	maxHTTPRecords        = 100_000
	maxHTTPBytes          = 64 << 20
	maxHTTPWait           = time.Hour
)

// HTTPSink posts batches of lines to a collector.
type HTTPSink struct {
	c        HTTPConfig
	client   *http.Client
	redacted string // the URL without a password, for errors
}

// NewHTTPSink checks c.
func NewHTTPSink(c HTTPConfig) (*HTTPSink, error) {
	if err := c.fill(); err != nil {
		return nil, err
	}
	client := c.Client
	if client == nil {
		client = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	u, _ := url.Parse(c.URL) // fill parsed it
	return &HTTPSink{c: c, client: client, redacted: u.Redacted()}, nil
}

func (c *HTTPConfig) fill() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return configErr("http sink URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return configErr("http sink URL %q: scheme %q is not http or https", u.Redacted(), u.Scheme)
	case u.Host == "":
		return configErr("http sink URL %q has no host", u.Redacted())
	}
	if err := fillInt("http sink batch_records", &c.MaxRecords, DefaultHTTPMaxRecords, maxHTTPRecords); err != nil {
		return err
	}
	if err := fillInt("http sink batch_bytes", &c.MaxBytes, DefaultHTTPMaxBytes, maxHTTPBytes); err != nil {
		return err
	}
	if err := fillDuration("http sink flush_interval", &c.Interval, DefaultHTTPInterval); err != nil {
		return err
	}
	return fillDuration("http sink timeout", &c.Timeout, DefaultHTTPTimeout)
}

func fillInt(name string, n *int, def, most int) error {
	switch {
	case *n < 0 || *n > most:
		return configErr("%s %d is not between 1 and %d", name, *n, most)
	case *n == 0:
		*n = def
	}
	return nil
}

func fillDuration(name string, d *time.Duration, def time.Duration) error {
	switch {
	case *d < 0 || *d > maxHTTPWait:
		return configErr("%s %s is not between 0 (the default, %s) and %s", name, *d, def, maxHTTPWait)
	case *d == 0:
		*d = def
	}
	return nil
}

// Name implements Sink.
func (s *HTTPSink) Name() string { return "http" }

// Batching implements Sink.
func (s *HTTPSink) Batching() Batching {
	return Batching{MaxRecords: s.c.MaxRecords, MaxBytes: s.c.MaxBytes, Interval: s.c.Interval, NewTicker: s.c.NewTicker}
}

// Write implements Sink: one POST of the batch.
func (s *HTTPSink) Write(ctx context.Context, batch []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.c.URL, bytes.NewReader(batch))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-ndjson")
	if s.c.Authorization != "" {
		req.Header.Set("Authorization", s.c.Authorization)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	// Read a little of the body so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("decisionlog: http sink: %s answered %s", s.redacted, resp.Status)
	}
	return nil
}

// Close implements Sink.
func (s *HTTPSink) Close() error {
	s.client.CloseIdleConnections()
	return nil
}
