package api

import (
	"net/http"
	"testing"

	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// FuzzCheckBody: whatever the body, the check route answers 400 (or 413)
// naming a field without calling the backend, or calls it once with a
// request within the contract's bounds.
func FuzzCheckBody(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"request_id": "r", "subject": {"tenant_id": "t", "ip": "::1"}, "resource": {"route": "/v1/x", "method": "GET"}}`,
		`{"context": {"risk_score": 0.5, "region": "eu"}, "descriptors": {"a": "b"}, "cost": 2, "mode": "leased", "dry_run": true}`,
		`{"context": {"risk_score": 1.0000001}}`,
		`{"cost": -9223372036854775808}`,
		`{"subject": {"ip": 1}}`,
		`{"subject": null, "descriptors": null}`,
		`{"Subject": {"IP": "x"}}`,
		`[]`, `null`, `{"a":`, "\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		b := &fakeBackend{}
		w := serve(b, "POST", "/v1/limit/check", body)
		switch w.Code {
		case http.StatusOK:
			method, got := b.lastCall()
			req, ok := got.(*pb.CheckRequest)
			if method != "Check" || b.numCalls() != 1 || !ok {
				t.Fatalf("200 after %d calls, last %s(%v)", b.numCalls(), method, got)
			}
			validCheck(t, req)
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			if e := errorBody(t, w); e.Field == "" || e.Message == "" || b.numCalls() != 0 {
				t.Fatalf("status %d, error %+v, %d backend calls", w.Code, e, b.numCalls())
			}
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	})
}

func validCheck(t *testing.T, req *pb.CheckRequest) {
	t.Helper()
	d := req.GetDescriptors()
	if d == nil || len(req.GetItems()) != 0 {
		t.Fatalf("not a descriptor request: %v", req)
	}
	if r := d.RiskScore; r != nil && !(*r >= 0 && *r <= 1) {
		t.Fatalf("risk_score %v passed", *r)
	}
	if d.GetCost() < 0 {
		t.Fatalf("cost %d passed", d.GetCost())
	}
	if _, ok := pb.Mode_name[int32(req.GetMode())]; !ok {
		t.Fatalf("mode %d passed", req.GetMode())
	}
}
