package noopserver

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorate/quorate/client"
	pb "github.com/quorate/quorate/rpc/quoratev1"
)

// lineWriter hands on the first line written to it.
type lineWriter struct {
	once sync.Once
	line chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { w.line <- string(p) })
	return len(p), nil
}

// Serve prints where it listens, answers every check ALLOW with one result
// per item, on Check and on CheckStream, and returns nil when ctx ends.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &lineWriter{line: make(chan string, 1)}
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, "127.0.0.1:0", out) }()
	line := <-out.line
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), listening)
	if !ok || !listenLine.MatchString(line) {
		t.Fatalf("printed %q", line)
	}
	c, err := client.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := &pb.CheckRequest{Mode: pb.Mode_MODE_LEASED, Items: []*pb.Item{{Key: "a", Limit: 5}, {Key: "", Limit: 7, Cost: -1}}}
	check := func(what string, resp *pb.CheckResponse, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		r := resp.GetResults()
		if resp.GetDecision() != pb.Decision_DECISION_ALLOW || len(r) != 2 || r[0].GetLimit() != 5 || r[1].GetLimit() != 7 ||
			r[1].GetDecision() != pb.Decision_DECISION_ALLOW || r[1].GetReason() != pb.Reason_REASON_WITHIN_LIMIT {
			t.Errorf("%s: %v; want ALLOW with one result per item", what, resp)
		}
	}
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	defer ccancel()
	resp, err := c.Check(cctx, req)
	check("Check", resp, err)
	s, err := c.CheckStream(cctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			resp, err := s.Check(cctx, req)
			check("CheckStream", resp, err)
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Errorf("closing the stream: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if err := Serve(context.Background(), "127.0.0.1:bad", io.Discard); err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("bad address: %v", err)
	}
}
