package raftgrpc

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A pipeline's responses complete its futures in send order, each with its
// own request's answer, while many requests are in flight.
func TestPipelineAnswersInOrder(t *testing.T) {
	nodes := startNodes(t, 2)
	recv, err := nodes[1].mgr.Transport("p")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		for {
			select {
			case rpc := <-recv.Consumer():
				req := rpc.Command.(*raft.AppendEntriesRequest)
				rpc.Respond(&raft.AppendEntriesResponse{Term: req.Term, LastLog: req.PrevLogEntry, Success: true}, nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-answered }()

	send, err := nodes[0].mgr.Transport("p")
	if err != nil {
		t.Fatal(err)
	}
	p, err := send.AppendEntriesPipeline(nodes[1].id, nodes[1].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()

	const n = 200 // well over pipelineMaxInFlight: back-pressure included
	sent := make(chan error, 1)
	go func() {
		for i := 1; i <= n; i++ {
			req := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: uint64(i), PrevLogTerm: 3, LeaderCommitIndex: uint64(i)}
			if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for i := 1; i <= n; i++ {
		select {
		case f := <-p.Consumer():
			if err := f.Error(); err != nil {
				t.Fatalf("future %d: %v", i, err)
			}
			if got := f.Request().PrevLogEntry; got != uint64(i) {
				t.Fatalf("future %d is request %d: out of order", i, got)
			}
			if got := f.Response().LastLog; got != uint64(i) {
				t.Fatalf("future %d got the answer to request %d", i, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no future %d in 10s", i)
		}
	}
	if err := <-sent; err != nil {
		t.Fatalf("send: %v", err)
	}
}

// A response that does not come within the timeout ends the pipeline: the
// oldest future fails, so raft falls back to plain AppendEntries, and the
// pipeline takes no more requests. An idle pipeline does not time out.
func TestPipelineResponseTimeout(t *testing.T) {
	nodes := startNodes(t, 2)
	nodes[0].mgr.timeout = 300 * time.Millisecond
	recv, err := nodes[1].mgr.Transport("p")
	if err != nil {
		t.Fatal(err)
	}
	send, err := nodes[0].mgr.Transport("p")
	if err != nil {
		t.Fatal(err)
	}
	p, err := send.AppendEntriesPipeline(nodes[1].id, nodes[1].addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()

	// Idle for longer than the timeout: nothing happens. The idle time is
	// what is under test, so it is a sleep.
	time.Sleep(3 * nodes[0].mgr.timeout)
	select {
	case f := <-p.Consumer():
		t.Fatalf("idle pipeline completed a future: %v", f.Error())
	default:
	}

	req := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 1, PrevLogTerm: 3}
	start := time.Now()
	if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
		t.Fatalf("send: %v", err)
	}
	select {
	case <-recv.Consumer(): // received, never answered
	case <-time.After(5 * time.Second):
		t.Fatal("request never arrived")
	}
	select {
	case f := <-p.Consumer():
		if f.Error() == nil {
			t.Fatal("unanswered request completed without an error")
		}
		if el := time.Since(start); el < nodes[0].mgr.timeout {
			t.Errorf("failed after %v, before the %v timeout", el, nodes[0].mgr.timeout)
		}
		t.Logf("failed after %v: %v", time.Since(start), f.Error())
	case <-time.After(5 * time.Second):
		t.Fatal("unanswered request still pending 5s later")
	}
	if _, err := p.AppendEntries(req, new(raft.AppendEntriesResponse)); !errors.Is(err, raft.ErrPipelineShutdown) {
		t.Errorf("send after the timeout: err = %v, want ErrPipelineShutdown", err)
	}
}
