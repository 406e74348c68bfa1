package policy

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quorate/quorate/policy/extract"
)

// FuzzParse: Parse reads documents from the network and disk. It must never
// panic; what it accepts must marshal back to a document that parses to the
// same policies, and either compile (and resolve) or be refused by Validate.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("testdata/plans.yaml"); err == nil {
		f.Add(data)
	}
	// Every document in the scripts is a seed.
	paths, _ := filepath.Glob("testdata/scripts/*")
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, in := range scriptInputs(string(data)) {
			f.Add([]byte(in))
		}
	}
	reqs := []Request{
		{},
		{TenantID: "t_44", TenantTier: "PRO", APIKeyID: "k", IP: "10.0.0.1", Route: "/v1/payments", Method: "POST", RiskScore: 0.95, HasRisk: true, IdempotencyKey: "i"},
		{IP: "2001:db8::1", Custom: map[string]string{"team": "a"}, UserID: "u"},
	}
	f.Add([]byte("policies: []\nextraction:\n  headers: {tenant_id: X-Org, user_id: \"\"}\n  custom: {team: X-Team}\n  trusted_proxies: [10.0.0.0/8, \"::1\"]\n  client_ip_headers: [X-Real-IP]\n"))
	f.Add([]byte("extraction: {trusted_proxies: [\"::ffff:10.0.0.0/104\"]}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDocument("fuzz.yaml", data)
		if err != nil {
			if strings.TrimSpace(err.Error()) == "" || !errors.Is(err, ErrInvalid) {
				t.Fatalf("not a clear refusal: %q", err)
			}
			return
		}
		ps := d.Policies
		if d.Extraction != nil {
			// What the parser accepts compiles, and survives the JSON the
			// meta log carries it in.
			if _, err := extract.Compile(d.Extraction); err != nil {
				t.Fatalf("parsed extraction does not compile: %v", err)
			}
			b, _ := json.Marshal(d.Extraction)
			var back extract.Extraction
			if err := json.Unmarshal(b, &back); err != nil || !extract.Same(&back, d.Extraction) {
				t.Fatalf("extraction round trip: %s (%v)", b, err)
			}
		}
		roundTrip(t, ps)
		s, err := Compile(ps, nil, 1)
		if err != nil {
			if Validate(ps) == nil {
				t.Fatalf("Compile refused what Validate accepts: %v", err)
			}
			return
		}
		for i := range reqs {
			s.Resolve(&reqs[i], t0)
		}
	})
}

func roundTrip(t *testing.T, ps []Policy) {
	out, err := json.Marshal(map[string][]Policy{"policies": ps})
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse("back.json", out)
	if err != nil {
		t.Fatalf("the canonical form does not parse: %v\n%s", err, out)
	}
	for i := range ps {
		if !same(&ps[i], &back[i]) {
			t.Fatalf("%s changed:\n%s\n%s", ps[i].ID, canonical(&ps[i]), canonical(&back[i]))
		}
	}
}

// scriptInputs returns the inputs of a script's directives: the lines
// between a directive and its "----".
func scriptInputs(script string) []string {
	var out []string
	for _, block := range strings.Split(script, "\n----\n") {
		lines := strings.Split(block, "\n")
		for i, l := range lines {
			if l == "policies" || strings.HasPrefix(l, "policies ") || l == "parse" || strings.HasPrefix(l, "parse ") {
				if in := strings.Join(lines[i+1:], "\n"); in != "" {
					out = append(out, in)
				}
				break
			}
		}
	}
	return out
}

// FuzzExtract: header values come from anyone; whatever they hold, the
// extracted descriptors make a request that validates.
func FuzzExtract(f *testing.F) {
	f.Add("10.0.0.1:5", "203.0.113.8, 10.0.0.2", "t_1", "/v1/x?y=1", "GET")
	f.Add("[::1]:5", "junk,,", "\xff\x00", "https://h/p#f", "")
	f.Add("pipe", "", strings.Repeat("a", 300), strings.Repeat("/", 1000), "\t")
	x, err := extract.Compile(&extract.Extraction{TrustedProxies: []string{"10.0.0.0/8", "::1"}, Custom: map[string]string{"c": "X-C"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, peer, xff, tenant, uri, method string) {
		r := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, RemoteAddr: peer, Header: http.Header{
			"X-Forwarded-For": {xff}, "X-Tenant-Id": {tenant}, "X-Forwarded-Uri": {uri}, "X-Forwarded-Method": {method}, "X-C": {tenant},
		}}
		for _, ex := range []*extract.Extractor{x, extract.Default()} {
			e := ex.Extract(r)
			req := RequestOf(e)
			if err := req.Validate(); err != nil {
				t.Fatalf("%+v: %v", e, err)
			}
		}
	})
}
