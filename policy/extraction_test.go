package policy

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/quorate/quorate/policy/extract"
)

func TestParseDocumentExtraction(t *testing.T) {
	doc := `policies:
  - policy_id: per_tenant
    key: [tenant_id]
    algorithm: fixed_window
    config: {limit: 5, period: 1m}
extraction:
  headers:
    tenant_id: X-Org
  custom: {team: X-Team}
  trusted_proxies: [10.0.0.0/8, 127.0.0.1]
`
	d, err := ParseDocument("p.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &extract.Extraction{Headers: map[string]string{"tenant_id": "X-Org"}, Custom: map[string]string{"team": "X-Team"}, TrustedProxies: []string{"10.0.0.0/8", "127.0.0.1"}}
	if len(d.Policies) != 1 || !reflect.DeepEqual(d.Extraction, want) {
		t.Fatalf("got %+v, %+v", d.Policies, d.Extraction)
	}
	// The JSON form of the same.
	b, _ := json.Marshal(map[string]any{"policies": d.Policies, "extraction": d.Extraction})
	d2, err := ParseDocument("p.json", b)
	if err != nil || !extract.Same(d2.Extraction, want) {
		t.Fatalf("json form: %+v, %v", d2.Extraction, err)
	}
	// Parse keeps accepting such a document (the policies only).
	if ps, err := Parse("p.yaml", []byte(doc)); err != nil || len(ps) != 1 {
		t.Fatalf("Parse: %v", err)
	}
	// An extraction alone is a document with no policies.
	d, err = ParseDocument("e.yaml", []byte("extraction: {trusted_proxies: [127.0.0.1/32]}\n"))
	if err != nil || len(d.Policies) != 0 || d.Extraction == nil {
		t.Fatalf("extraction only: %+v, %v", d, err)
	}
	for _, c := range []struct{ doc, want string }{
		{"extraction:\n  trusted_proxies: [10.0.0.0/8, nope]\n", "e.yaml:2:33: extraction.trusted_proxies[1]: \"nope\": want a CIDR"},
		{"extraction:\n  headers:\n    ip: X-Ip\n", "e.yaml:3:9: extraction.headers.ip: unknown descriptor"},
		{"extraction:\n  headerz: {}\n", "e.yaml:2:12: extraction.headerz: unknown field (known: headers, custom, trusted_proxies, client_ip_headers)"},
		{"extraction: {}\nother: 1\n", "e.yaml:2:8: other: unknown top-level field"},
		{"extraction:\n  custom: [a]\n", "e.yaml:2:11: extraction.custom: want a mapping"},
	} {
		_, err := ParseDocument("e.yaml", []byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v\nwant %q", c.doc, err, c.want)
		}
	}
}

func TestExtractionDiff(t *testing.T) {
	got := ExtractionDiff(nil, &extract.Extraction{Headers: map[string]string{"tenant_id": "X-Org"}})
	if got != "~ extraction: headers.tenant_id (unset) -> X-Org\n" {
		t.Fatalf("diff %q", got)
	}
	if ExtractionDiff(&extract.Extraction{}, nil) != "" {
		t.Fatal("no change has a diff")
	}
}

func TestSnapshotExtractor(t *testing.T) {
	var nilSnap *Snapshot
	if nilSnap.Extractor() != extract.Default() {
		t.Fatal("a nil snapshot's extractor is not the default")
	}
	s, err := Compile(nil, nil, 1)
	if err != nil || s.Extractor() != extract.Default() {
		t.Fatalf("a snapshot without extraction: %v", err)
	}
	x, err := extract.Compile(&extract.Extraction{Headers: map[string]string{"tenant_id": "X-Org"}})
	if err != nil || s.WithExtractor(x).Extractor() != x || s.Extractor() != extract.Default() {
		t.Fatalf("WithExtractor: %v", err)
	}
}

// Values read from headers are bounded and cleaned, never refused: the
// request they make validates, however long or odd the headers.
func TestRequestOfValidates(t *testing.T) {
	x, err := extract.Compile(&extract.Extraction{Custom: map[string]string{"team": "X-Team"}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "1.2.3.4:5"
	r.Header.Set("X-Tenant-Id", strings.Repeat("é", 5000))
	r.Header.Set("X-User-Id", "u\x01\xff")
	r.Header.Set("X-Forwarded-Uri", "/"+strings.Repeat("p", 70000))
	r.Header.Set("X-Team", strings.Repeat("t", MaxValueLen+1))
	req := RequestOf(x.Extract(r))
	if err := req.Validate(); err != nil {
		t.Fatalf("extracted values do not validate: %v", err)
	}
	if req.IP != "1.2.3.4" || req.Custom["team"] == "" || req.UserID != "u\uFFFD\uFFFD" {
		t.Fatalf("request %+v", req)
	}
}

// An extraction accepts exactly the custom names a request may carry.
func TestExtractionCustomNamesAgree(t *testing.T) {
	for _, name := range []string{"team", "a.b-c_9", "Team", "", "te am", "ü", strings.Repeat("n", 64), strings.Repeat("n", 65)} {
		_, errX := extract.Compile(&extract.Extraction{Custom: map[string]string{name: "X-C"}})
		r := Request{Custom: map[string]string{name: "v"}}
		errR := r.Validate()
		if (errX == nil) != (errR == nil) {
			t.Errorf("custom name %q: extraction says %v, request says %v", name, errX, errR)
		}
	}
}
