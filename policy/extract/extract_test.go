package extract

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func req(remote, target string, hdr ...string) *http.Request {
	r := httptest.NewRequest("GET", target, nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestExtractDefaults(t *testing.T) {
	x := Default()
	got := x.Extract(req("198.51.100.7:4711", "/v1/forward-auth?x=1",
		"x-tenant-id", "t_44", "X-API-KEY-ID", "k_9", "x-user-id", " u_1 ",
		"X-Forwarded-Uri", "/v1/payments?card=4111#frag", "X-Forwarded-Method", "post",
		"X-Forwarded-For", "203.0.113.8", // not believed: no proxy is trusted
		"X-Tenant-Tier", "ENTERPRISE")) // not read by default: a client could pick its plan
	want := Extracted{TenantID: "t_44", APIKeyID: "k_9", UserID: "u_1", IP: "198.51.100.7", Route: "/v1/payments", Method: "POST"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Without the forwarded headers: the request's own path and method.
	r := req("[2001:db8::1]:80", "/v1/orders?q=1")
	r.Method = "DELETE"
	got = x.Extract(r)
	if got.Route != "/v1/orders" || got.Method != "DELETE" || got.IP != "2001:db8::1" || got.TenantID != "" || got.Custom != nil {
		t.Fatalf("got %+v", got)
	}
	// An absolute forwarded URI keeps only its path.
	if got := x.Extract(req("1.2.3.4:1", "/", "X-Forwarded-Uri", "https://api.example.com/v2/x?y")); got.Route != "/v2/x" {
		t.Fatalf("route %q, want /v2/x", got.Route)
	}
}

func TestExtractClientIP(t *testing.T) {
	x, err := Compile(&Extraction{TrustedProxies: []string{"10.0.0.0/8", "192.0.2.1", "::ffff:172.16.0.0/108"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, peer string
		hdr        []string
		want       string
	}{
		{"untrusted peer: headers ignored", "198.51.100.7:1", []string{"X-Forwarded-For", "203.0.113.8"}, "198.51.100.7"},
		{"trusted peer, one hop", "10.1.2.3:1", []string{"X-Forwarded-For", "203.0.113.8"}, "203.0.113.8"},
		{"trusted hops skipped", "10.1.2.3:1", []string{"X-Forwarded-For", "203.0.113.8, 10.9.9.9,192.0.2.1"}, "203.0.113.8"},
		// A client that writes its own X-Forwarded-For only adds hops on the
		// left: the first untrusted from the right is what the proxy saw.
		{"spoofed left hops", "10.1.2.3:1", []string{"X-Forwarded-For", "1.1.1.1, 203.0.113.8"}, "203.0.113.8"},
		{"several headers are one list", "10.1.2.3:1", []string{"X-Forwarded-For", "1.1.1.1", "X-Forwarded-For", "203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"all trusted: the leftmost", "10.1.2.3:1", []string{"X-Forwarded-For", "10.0.0.9, 10.0.0.2"}, "10.0.0.9"},
		{"garbage hop ends the walk", "10.1.2.3:1", []string{"X-Forwarded-For", "203.0.113.8, junk, 10.0.0.2"}, "10.0.0.2"},
		{"garbage only: the peer", "10.1.2.3:1", []string{"X-Forwarded-For", "junk"}, "10.1.2.3"},
		{"hop with port", "10.1.2.3:1", []string{"X-Forwarded-For", "[2001:db8::5]:443"}, "2001:db8::5"},
		{"X-Real-IP when no XFF", "192.0.2.1:1", []string{"X-Real-IP", "203.0.113.10"}, "203.0.113.10"},
		{"mapped peer in a mapped prefix", "[::ffff:172.16.0.9]:1", []string{"X-Forwarded-For", "203.0.113.11"}, "203.0.113.11"},
		{"unparsable peer", "pipe", nil, ""},
	} {
		if got := x.Extract(req(c.peer, "/", c.hdr...)).IP; got != c.want {
			t.Errorf("%s: ip %q, want %q", c.name, got, c.want)
		}
	}
	// A huge X-Forwarded-For of trusted hops is walked only so far.
	long := strings.Repeat("10.0.0.1, ", 10000) + "10.0.0.2"
	if got := x.Extract(req("10.1.2.3:1", "/", "X-Forwarded-For", long)).IP; got != "10.0.0.1" {
		t.Errorf("long chain: %q", got)
	}
}

func TestExtractConfigured(t *testing.T) {
	x, err := Compile(&Extraction{
		Headers: map[string]string{"tenant_id": "X-Org", "user_id": "", "tenant_tier": "x-plan", "service": "X-Service"},
		Custom:  map[string]string{"team": "X-Team", "region2": "x-region"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := x.Extract(req("1.2.3.4:5", "/a", "X-Org", "o1", "x-tenant-id", "ignored", "X-User-Id", "ignored",
		"X-Plan", "PRO", "X-Service", "billing", "X-Team", "core", "X-Api-Key-Id", "k"))
	want := Extracted{TenantID: "o1", APIKeyID: "k", TenantTier: "PRO", Service: "billing", IP: "1.2.3.4",
		Route: "/a", Method: "GET", Custom: map[string]string{"team": "core"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

// Values from headers are bounded and cleaned, never refused: a check made
// of them validates.
func TestExtractBoundsValues(t *testing.T) {
	x := Default()
	a := strings.Repeat("é", 5000)
	b := strings.Repeat("é", 4999) + "e"
	ga := x.Extract(req("1.2.3.4:5", "/", "x-tenant-id", a, "x-user-id", "u\x01\xff", "X-Forwarded-Uri", "/"+strings.Repeat("p", 70000)))
	gb := x.Extract(req("1.2.3.4:5", "/", "x-tenant-id", b))
	if len(ga.TenantID) > MaxValueLen || ga.TenantID == gb.TenantID {
		t.Fatalf("long values: %d bytes, distinct %v", len(ga.TenantID), ga.TenantID != gb.TenantID)
	}
	if ga.UserID != "u\uFFFD\uFFFD" {
		t.Fatalf("user %q", ga.UserID)
	}
	if len(ga.Route) > MaxValueLen || !utf8.ValidString(ga.TenantID) || !utf8.ValidString(ga.Route) {
		t.Fatalf("route %d bytes, tenant valid UTF-8 %v", len(ga.Route), utf8.ValidString(ga.TenantID))
	}
}

func TestCompileExtractionRefuses(t *testing.T) {
	for _, c := range []struct {
		e    Extraction
		want string
	}{
		{Extraction{Headers: map[string]string{"ip": "X-Ip"}}, "extraction.headers.ip: unknown descriptor"},
		{Extraction{Headers: map[string]string{"tenant_id": "bad header"}}, "extraction.headers.tenant_id: \"bad header\": want a header name"},
		{Extraction{Custom: map[string]string{"Bad": "X-B"}}, "extraction.custom.Bad: the name must be"},
		{Extraction{Custom: map[string]string{"b": ""}}, "extraction.custom.b: \"\": want a header name"},
		{Extraction{TrustedProxies: []string{"10.0.0.0/33"}}, "extraction.trusted_proxies[0]: \"10.0.0.0/33\": want a CIDR"},
		{Extraction{ClientIPHeaders: []string{"a", "b", "c", "d", "e"}}, "extraction.client_ip_headers: 5 headers, at most 4"},
	} {
		_, err := Compile(&c.e)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want %q", c.e, err, c.want)
		}
	}
	many := map[string]string{}
	for i := range MaxCustom + 1 {
		many["c"+strconv.Itoa(i)] = "X-C"
	}
	if _, err := Compile(&Extraction{Custom: many}); err == nil || !strings.Contains(err.Error(), "at most 32") {
		t.Errorf("33 custom descriptors: %v", err)
	}
}

func TestSameNormal(t *testing.T) {
	if !Same(nil, &Extraction{}) || Normal(&Extraction{Headers: map[string]string{}}) != nil {
		t.Fatal("an empty extraction is not the defaults")
	}
	org := &Extraction{Headers: map[string]string{"tenant_id": "X-Org"}}
	if Same(nil, org) || Normal(org) != org {
		t.Fatal("an extraction that says something is the defaults")
	}
}

// Problems is Compile's refusals field by field, in order, unbounded.
func TestProblems(t *testing.T) {
	e := &Extraction{Headers: map[string]string{"ip": "X-Ip"}, TrustedProxies: []string{"10.0.0.0/8", "nope"}}
	want := []Problem{
		{"headers.ip", "unknown descriptor (known: tenant_id, api_key_id, user_id, tenant_tier, service, region, route, method; custom ones go under custom)"},
		{"trusted_proxies[1]", `"nope": want a CIDR (10.0.0.0/8) or an address`},
	}
	if got := Problems(e); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if got := Problems(&Extraction{TrustedProxies: []string{"10.0.0.0/8"}}); got != nil {
		t.Fatalf("a good extraction: %q", got)
	}
	bad := make([]string, 25)
	for i := range bad {
		bad[i] = "nope"
	}
	e = &Extraction{TrustedProxies: bad}
	if got := len(Problems(e)); got != 25 {
		t.Fatalf("%d problems, want 25", got)
	}
	_, err := Compile(e)
	if msg := err.Error(); strings.Count(msg, "\n") != 20 || !strings.HasSuffix(msg, "\n(more errors not shown)") {
		t.Fatalf("25 problems in one error:\n%s", msg)
	}
}
