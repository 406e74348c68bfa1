package httpheaders

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	h := http.Header{}
	Set(h, Decision{Allowed: true, Reason: "WITHIN_LIMIT", PolicyID: `we"ird`, Decided: true, Limit: 100, Remaining: 42, Reset: 1500 * time.Millisecond})
	want := map[string]string{"RateLimit-Policy": `"we\"ird";q=100`, "RateLimit": `"we\"ird";r=42;t=2`,
		"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "42", "X-RateLimit-Reset": "2", "Retry-After": "",
		"X-Rate-Limit-Decision": "ALLOW", "X-Rate-Limit-Reason": "WITHIN_LIMIT", "X-Policy-Id": `we"ird`}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	h = http.Header{}
	Set(h, Decision{RetryAfter: time.Nanosecond})
	if h.Get("Retry-After") != "1" || h.Get("RateLimit") != "" || h.Get("X-Policy-Id") != "" || h.Get("X-Rate-Limit-Decision") != "DENY" {
		t.Errorf("deny without numbers: %v", h)
	}
	h = http.Header{}
	Set(h, Decision{RetryAfter: 2*time.Second + 1})
	if h.Get("Retry-After") != "3" {
		t.Errorf("Retry-After %q, want 3 (rounded up)", h.Get("Retry-After"))
	}
}

func TestRequestID(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Request-Id", "req-81f2")
	if RequestIDOf(r) != "req-81f2" {
		t.Fatal("the caller's id is not kept")
	}
	for _, bad := range []string{"", "a\nb", string(make([]byte, 257))} {
		r.Header.Set("X-Request-Id", bad)
		if id := RequestIDOf(r); id == bad || len(id) != 32 {
			t.Errorf("%q: id %q", bad, id)
		}
	}
	if a, b := NewRequestID(), NewRequestID(); a == b {
		t.Fatal("two new ids are equal")
	}
	h := http.Header{}
	SetTrace(h, "r", "t", "")
	if h.Get("X-Request-Id") != "r" || h.Get("X-Tenant-Id") != "t" || len(h.Values("X-Api-Key-Id")) != 0 {
		t.Fatalf("trace: %v", h)
	}
}
