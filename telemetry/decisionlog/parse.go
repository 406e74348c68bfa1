package decisionlog

import (
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseSink makes a sink from a command-line spec:
//
//	stdout
//	file:/var/log/quorate/decisions.jsonl
//	file:/var/log/quorate/decisions.jsonl?max_size_mb=100&max_files=5&max_age_days=30&compress=true
//	http://collector:8080/ingest
//	https://collector/ingest?stream=quorate#batch_records=500&batch_bytes=1048576&flush_interval=1s&timeout=5s&auth_env=COLLECTOR_AUTH
//
// A file's options follow '?'. An HTTP sink's options follow '#' (a
// fragment is never sent, so the URL's own query stays the collector's);
// auth_env names an environment variable, and auth_file a file, holding
// the Authorization header's value, so no secret sits in the flag.
// Errors name the spec and the part that is wrong.
func ParseSink(spec string) (Sink, error) {
	var (
		s   Sink
		err error
	)
	switch {
	case spec == "stdout":
		return NewWriterSink("stdout", os.Stdout), nil
	case strings.HasPrefix(spec, "file:"):
		s, err = parseFile(spec)
	case strings.HasPrefix(spec, "http://"), strings.HasPrefix(spec, "https://"):
		s, err = parseHTTP(spec)
	case spec == "":
		err = configErr("empty spec (want stdout, file:PATH, http://... or https://...)")
	default:
		err = configErr("unknown kind of sink (want stdout, file:PATH, http://... or https://...)")
	}
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", redactSpec(spec), err)
	}
	return s, nil
}

// redactSpec hides an HTTP spec's password in errors.
func redactSpec(spec string) string {
	if u, err := url.Parse(spec); err == nil && u.User != nil {
		return u.Redacted()
	}
	return spec
}

func parseFile(spec string) (Sink, error) {
	rest := strings.TrimPrefix(spec, "file:")
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		host, _, _ := strings.Cut(after, "/")
		if host != "" && host != "localhost" {
			return nil, configErr("file URL names host %q (only a local path is written)", host)
		}
		rest = after[len(host):]
	}
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return nil, configErr("no path after file:")
	}
	opts, err := parseOptions(query, "max_size_mb", "max_files", "max_age_days", "compress")
	if err != nil {
		return nil, err
	}
	c := FileConfig{Path: path}
	for _, o := range []struct {
		name string
		to   *int
	}{{"max_size_mb", &c.MaxSizeMB}, {"max_files", &c.MaxFiles}, {"max_age_days", &c.MaxAgeDays}} {
		if err := opts.positive(o.name, o.to); err != nil {
			return nil, err
		}
	}
	if v, ok := opts["compress"]; ok {
		if c.Compress, err = strconv.ParseBool(v); err != nil {
			return nil, configErr("compress %q is not true or false", v)
		}
	}
	return NewFileSink(c)
}

func parseHTTP(spec string) (Sink, error) {
	u, err := url.Parse(spec)
	if err != nil {
		return nil, configErr("URL: %v", err)
	}
	opts, err := parseOptions(u.EscapedFragment(), "batch_records", "batch_bytes", "flush_interval", "timeout", "auth_env", "auth_file")
	if err != nil {
		return nil, err
	}
	u.Fragment, u.RawFragment = "", ""
	c := HTTPConfig{URL: u.String()}
	if err := opts.positive("batch_records", &c.MaxRecords); err != nil {
		return nil, err
	}
	if err := opts.positive("batch_bytes", &c.MaxBytes); err != nil {
		return nil, err
	}
	if err := opts.duration("flush_interval", &c.Interval); err != nil {
		return nil, err
	}
	if err := opts.duration("timeout", &c.Timeout); err != nil {
		return nil, err
	}
	if c.Authorization, err = opts.authorization(); err != nil {
		return nil, err
	}
	return NewHTTPSink(c)
}

// options are a spec's name=value pairs, each given at most once.
type options map[string]string

func parseOptions(query string, known ...string) (options, error) {
	values, err := url.ParseQuery(query)
	if err != nil {
		return nil, configErr("options %q: %v", query, err)
	}
	opts := options{}
	for name, vs := range values {
		switch {
		case !slices.Contains(known, name):
			return nil, configErr("unknown option %q (known: %s)", name, strings.Join(known, ", "))
		case len(vs) > 1:
			return nil, configErr("option %s given %d times", name, len(vs))
		}
		opts[name] = vs[0]
	}
	return opts, nil
}

// positive sets *to from a whole number > 0, if the option is given.
func (o options) positive(name string, to *int) error {
	v, ok := o[name]
	if !ok {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return configErr("%s %q is not a whole number above 0", name, v)
	}
	*to = n
	return nil
}

func (o options) duration(name string, to *time.Duration) error {
	v, ok := o[name]
	if !ok {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return configErr("%s %q is not a duration above 0 such as 1s or 500ms", name, v)
	}
	*to = d
	return nil
}

func (o options) authorization() (string, error) {
	env, byEnv := o["auth_env"]
	file, byFile := o["auth_file"]
	switch {
	case byEnv && byFile:
		return "", configErr("auth_env and auth_file are both given")
	case byEnv:
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return "", configErr("auth_env: environment variable %q is empty or unset", env)
		}
		return v, nil
	case byFile:
		b, err := os.ReadFile(file)
		if err != nil {
			return "", configErr("auth_file: %v", err)
		}
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
		return "", configErr("auth_file: %s is empty", file)
	}
	return "", nil
}
