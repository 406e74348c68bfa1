package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbe(t *testing.T) {
	ready := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.Error(w, "not ready: shard 2 has no leader", http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(ready)
	defer srv.Close()

	r := runCLI(t, "probe", "--url", srv.URL+"/readyz")
	expectRun(t, r, exitOK, nil, nil)

	r = runCLI(t, "probe", "--url", srv.URL+"/other")
	expectRun(t, r, exitFailure, nil, []string{"503 Service Unavailable: not ready: shard 2 has no leader"})
}

func TestProbeUnreachable(t *testing.T) {
	// A port that was free a moment ago: nothing listens there.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	r := runCLI(t, "probe", "--url", "http://"+addr+"/readyz")
	expectRun(t, r, exitFailure, nil, []string{"probe http://" + addr + "/readyz:", "connection refused"})
}

func TestProbeUsage(t *testing.T) {
	for _, args := range [][]string{
		{"probe"},
		{"probe", "--url", "127.0.0.1:7501/readyz"},
		{"probe", "--url", "ftp://h/x"},
	} {
		expectRun(t, runCLI(t, args...), exitUsage, nil, []string{"--url"})
	}
	expectRun(t, runCLI(t, "probe", "--url", "http://h/", "--timeout", "0s"), exitUsage, nil, []string{"--timeout 0s: must be positive"})
}

func TestProbeTimeout(t *testing.T) {
	// The handler holds the answer until the prober gives up.
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	r := runCLI(t, "probe", "--url", srv.URL+"/readyz", "--timeout", "100ms")
	expectRun(t, r, exitFailure, nil, []string{"no answer within --timeout"})
}
