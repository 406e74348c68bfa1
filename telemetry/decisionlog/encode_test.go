package decisionlog

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

func TestAppendJSONLine(t *testing.T) {
	r := typical(0)
	r.SampleRate = 1
	want := `{"time":"2026-03-01T03:12:00.123456789Z","request_id":"req-00000000",` +
		`"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","node":"n1","source":"grpc","mode":"leased",` +
		`"decision":"DENY","reason":"OVER_LIMIT","policy":"plan_free","policy_version":7,"latency_us":42,` +
		`"descriptors":{"tenant_id":"t_1","api_key_id":"k_1","route":"/v1/search","method":"GET"},` +
		`"policies":[{"id":"plan_free","mode":"HARD","decision":"DENY","reason":"OVER_LIMIT","remaining":0,"limit":10,"key":"t_1"}],` +
		`"sample_rate":1}`
	if got := string(r.AppendJSON(nil)); got != want {
		t.Errorf("line:\n got %s\nwant %s", got, want)
	}
	// The common allow: no policies, few descriptors, a sample rate.
	a := Record{Time: t0, Decision: "ALLOW", Reason: "WITHIN_LIMIT", SampleRate: 0.1, Descriptors: Descriptors{TenantID: "t"}}
	want = `{"time":"2026-03-01T03:12:00.123456789Z","decision":"ALLOW","reason":"WITHIN_LIMIT","descriptors":{"tenant_id":"t"},"sample_rate":0.1}`
	if got := string(a.AppendJSON(nil)); got != want {
		t.Errorf("allow line:\n got %s\nwant %s", got, want)
	}
	// Custom descriptors sorted by name, so equal records make equal lines.
	c := Record{Time: t0, Descriptors: Descriptors{IP: "::1", Custom: map[string]string{"zone": "b", "app": "x", "env": "", "mesh": "m"}}}
	want = `{"time":"2026-03-01T03:12:00.123456789Z","descriptors":{"ip":"::1","custom":{"app":"x","mesh":"m","zone":"b"}},"sample_rate":0}`
	for range 20 { // map order differs run to run
		if got := string(c.AppendJSON(nil)); got != want {
			t.Fatalf("custom line:\n got %s\nwant %s", got, want)
		}
	}
}

// Each record is written by AppendJSON and by encoding/json; both lines
// must be valid and decode to the same Record, and (its strings being
// valid UTF-8) to the record itself.
func TestAppendJSONAsEncodingJSON(t *testing.T) {
	full := typical(1)
	full.Descriptors = Descriptors{
		TenantID: "t", APIKeyID: "k", UserID: "u", IP: "198.51.100.7", Route: "/r", Method: "POST",
		Service: "s", Region: "eu", TenantTier: "FREE",
		Custom: map[string]string{"zeta": "1", "alpha": "2", "envoy.node": "x"},
	}
	full.Policies = append(full.Policies, Verdict{ID: "shadow", Mode: "SHADOW", Decision: "ALLOW", Reason: "SHADOW_WOULD_DENY", Remaining: -3, Limit: math.MaxInt64})
	full.Truncated = true
	full.DenyCache = true
	full.SampleRate = 0.25
	cases := map[string]Record{
		"zero":        {},
		"typical":     *typical(2),
		"full":        *full,
		"escapes":     {RequestID: "a\"b\\c\n\r\t\x00\x1f\x7f</script>&", TraceID: "\u2028\u2029", Node: "ünïcødé 日本 🎉"},
		"verdicts":    {Policies: []Verdict{{}, {Key: "k"}, {Mode: "SOFT", Limit: -1}, {ID: "only"}}},
		"custom only": {Descriptors: Descriptors{Custom: map[string]string{"": "empty name", "a\"": "q"}}},
		"rates":       {SampleRate: 1e-9},
		"big rate":    {SampleRate: 1e21},
		"negatives":   {LatencyUS: math.MinInt64, PolicyVersion: math.MaxUint64},
		"throttle":    {Decision: "THROTTLE", DelayMs: 250, Reason: "THROTTLED"},
		"local time":  {Time: time.Date(1999, 12, 31, 23, 59, 59, 1, time.FixedZone("X", 3600))},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) {
			got := sameAsEncodingJSON(t, &r)
			want := r
			want.Time = r.Time.UTC()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestAppendJSONInvalidUTF8(t *testing.T) {
	r := Record{RequestID: "a\xffb\xc3", Descriptors: Descriptors{Custom: map[string]string{"k\xfe": "v\x80"}}}
	got := sameAsEncodingJSON(t, &r)
	if got.RequestID != "a\ufffdb\ufffd" || got.Descriptors.Custom["k\ufffd"] != "v\ufffd" {
		t.Errorf("invalid UTF-8 not replaced byte by byte: %+v", got)
	}
}

func TestAppendJSONNonFiniteRate(t *testing.T) {
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		r := Record{SampleRate: f}
		line := r.AppendJSON(nil)
		var got Record
		if err := json.Unmarshal(line, &got); err != nil || got.SampleRate != 0 {
			t.Errorf("rate %v: %s (%v)", f, line, err)
		}
	}
}

// sameAsEncodingJSON checks that AppendJSON's line is valid JSON decoding
// to what encoding/json's line decodes to, and returns it decoded.
func sameAsEncodingJSON(t *testing.T, r *Record) Record {
	t.Helper()
	line := r.AppendJSON(nil)
	// json.Valid lets invalid UTF-8 pass (and Unmarshal replaces it), but
	// JSON text is UTF-8 and other readers (jq, Python) refuse it.
	if !json.Valid(line) || !utf8.Valid(line) {
		t.Fatalf("invalid JSON: %q", line)
	}
	var got, want Record
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("decode %s: %v", line, err)
	}
	std, err := json.Marshal(normalized(r))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(std, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("AppendJSON and encoding/json differ:\n%s\n%s", line, std)
	}
	return got
}

// normalized is r as AppendJSON means it: time in UTC, custom descriptors
// with empty values not written, a non-finite sample rate as 0.
func normalized(r *Record) *Record {
	n := *r
	n.Time = r.Time.UTC()
	n.Descriptors.Custom = nil
	for k, v := range r.Descriptors.Custom {
		if v != "" {
			if n.Descriptors.Custom == nil {
				n.Descriptors.Custom = map[string]string{}
			}
			n.Descriptors.Custom[k] = v
		}
	}
	if math.IsNaN(n.SampleRate) || math.IsInf(n.SampleRate, 0) {
		n.SampleRate = 0
	}
	return &n
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("req-1", "4bf9", "t_1", "/v1/search", "envoy.node", "gw", "plan_free", "OVER_LIMIT", uint64(7), int64(42), int64(0), int64(1772334720123456789), uint8(255))
	f.Add("\x00\"\\", "\xff\xfe", "\u2028", "</script>", "", "", "\x7f", "ü", uint64(0), int64(-1), int64(math.MinInt64), int64(0), uint8(0))
	f.Fuzz(func(t *testing.T, reqID, trace, tenant, route, ckey, cval, policy, reason string,
		version uint64, latency, remaining, unixNano int64, rate uint8) {
		r := Record{
			Time: time.Unix(0, unixNano), RequestID: reqID, TraceID: trace, Node: policy + reason,
			Source: route, Mode: tenant, Decision: reason, Reason: reason, Policy: policy,
			PolicyVersion: version, LatencyUS: latency,
			Descriptors: Descriptors{TenantID: tenant, Route: route, IP: trace, Custom: map[string]string{ckey: cval, cval: ckey}},
			Policies:    []Verdict{{ID: policy, Mode: reason, Remaining: remaining, Limit: latency, Key: ckey + cval}, {Key: reqID}},
			SampleRate:  float64(rate) / 255,
			Truncated:   rate%2 == 0,
			DenyCache:   rate%3 == 0,
		}
		got := sameAsEncodingJSON(t, &r)
		if allValidUTF8(reqID, trace, tenant, route, ckey, cval, policy, reason) {
			want := *normalized(&r)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
		}
	})
}

func allValidUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}
