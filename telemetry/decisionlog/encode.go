package decisionlog

import (
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends r as one JSON object (no newline) and returns the
// extended buffer. It writes what encoding/json.Marshal would, field for
// field, without reflection and, for a record without custom descriptors,
// without allocating (BenchmarkAppendJSON against BenchmarkEncodingJSON):
// strings are escaped as encoding/json escapes them (invalid UTF-8 becomes
// U+FFFD), empty fields are left out, custom descriptors are sorted by
// name, and a SampleRate that is not a finite number is written as 0.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = appendField(b, `,"request_id":`, r.RequestID)
	b = appendField(b, `,"trace_id":`, r.TraceID)
	b = appendField(b, `,"node":`, r.Node)
	b = appendField(b, `,"source":`, r.Source)
	b = appendField(b, `,"mode":`, r.Mode)
	b = appendField(b, `,"decision":`, r.Decision)
	if r.DelayMs != 0 {
		b = strconv.AppendInt(append(b, `,"delay_ms":`...), r.DelayMs, 10)
	}
	b = appendField(b, `,"reason":`, r.Reason)
	b = appendField(b, `,"policy":`, r.Policy)
	if r.PolicyVersion != 0 {
		b = strconv.AppendUint(append(b, `,"policy_version":`...), r.PolicyVersion, 10)
	}
	if r.LatencyUS != 0 {
		b = strconv.AppendInt(append(b, `,"latency_us":`...), r.LatencyUS, 10)
	}
	if r.DenyCache {
		b = append(b, `,"deny_cache":true`...)
	}
	if !r.Descriptors.IsZero() {
		b = r.Descriptors.appendJSON(append(b, `,"descriptors":`...))
	}
	if len(r.Policies) > 0 {
		b = appendVerdicts(append(b, `,"policies":`...), r.Policies)
	}
	b = appendFloat(append(b, `,"sample_rate":`...), r.SampleRate)
	if r.Truncated {
		b = append(b, `,"truncated":true`...)
	}
	return append(b, '}')
}

func (d *Descriptors) appendJSON(b []byte) []byte {
	n := len(b)
	b = appendField(b, `,"tenant_id":`, d.TenantID)
	b = appendField(b, `,"api_key_id":`, d.APIKeyID)
	b = appendField(b, `,"user_id":`, d.UserID)
	b = appendField(b, `,"ip":`, d.IP)
	b = appendField(b, `,"route":`, d.Route)
	b = appendField(b, `,"method":`, d.Method)
	b = appendField(b, `,"service":`, d.Service)
	b = appendField(b, `,"region":`, d.Region)
	b = appendField(b, `,"tenant_tier":`, d.TenantTier)
	b = appendCustom(b, d.Custom)
	return closeObject(b, n)
}

// closeObject ends an object whose fields, from b[n:], were each written
// with a leading comma: the first comma becomes the opening brace, which
// is cheaper than asking before every field whether one came before.
func closeObject(b []byte, n int) []byte {
	if len(b) == n {
		return append(b, '{', '}')
	}
	b[n] = '{'
	return append(b, '}')
}

// appendCustom writes `,"custom":{...}` with the non-empty entries sorted
// by name (as encoding/json orders a map), so a line is deterministic.
func appendCustom(b []byte, m map[string]string) []byte {
	var stack [16]string // policy.MaxCustom is 32; most requests carry few
	keys := stack[:0]
	for k, v := range m {
		if v != "" {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return b
	}
	slices.Sort(keys)
	b = append(b, `,"custom":{`...)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, k), ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

func appendVerdicts(b []byte, vs []Verdict) []byte {
	b = append(b, '[')
	for i := range vs {
		if i > 0 {
			b = append(b, ',')
		}
		b = vs[i].appendJSON(b)
	}
	return append(b, ']')
}

func (v *Verdict) appendJSON(b []byte) []byte {
	n := len(b)
	b = appendField(b, `,"id":`, v.ID)
	b = appendField(b, `,"mode":`, v.Mode)
	b = appendField(b, `,"decision":`, v.Decision)
	b = appendField(b, `,"reason":`, v.Reason)
	b = strconv.AppendInt(append(b, `,"remaining":`...), v.Remaining, 10)
	b = strconv.AppendInt(append(b, `,"limit":`...), v.Limit, 10)
	b = appendField(b, `,"key":`, v.Key)
	return closeObject(b, n)
}

// appendField writes name and s unless s is empty.
func appendField(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, name...), s)
}

func appendFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string: quote, backslash and control
// characters escaped, each byte of invalid UTF-8 as \ufffd, the rest as is.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = appendEscaped(append(b, s[start:i]...), c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, s[start:i]...), `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func appendEscaped(b []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(b, '\\', c)
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}
