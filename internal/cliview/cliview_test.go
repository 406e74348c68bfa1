package cliview

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{1, "1ms"}, // rounded up: a wait is never shown shorter
		{600 * time.Millisecond, "600ms"},
		{8669559184, "8.67s"},
		{9999999999, "10s"},
		{10 * time.Second, "10s"},
		{30769990262, "30.8s"},
		{59950000001, "1m0s"},
		{88669469479, "1m29s"},
		{2*time.Hour + 1, "2h0m1s"},
	} {
		if got := Duration(c.d); got != c.want {
			t.Errorf("Duration(%v) = %q; want %q", c.d, got, c.want)
		}
	}
}

func TestRPCError(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{status.Error(codes.InvalidArgument, "items[0].key: empty key"), "InvalidArgument: items[0].key: empty key"},
		{status.Error(codes.Unavailable, "connection refused"), "Unavailable: connection refused (is a node listening on h:1?)"},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), "DeadlineExceeded: context deadline exceeded (no answer from h:1 within --timeout 2s)"},
		{errors.New("plain"), "plain"},
	}
	for _, tt := range tests {
		if got := RPCError(tt.err, "h:1", 2*time.Second).Error(); got != tt.want {
			t.Errorf("RPCError(%v) = %q; want %q", tt.err, got, tt.want)
		}
	}
}
