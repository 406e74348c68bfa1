package api

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
)

// TestAdminErrors: the node's error kinds become their status codes, with
// the node's message; an unknown outcome stays Unknown (the change may
// have applied), whatever call it came from.
func TestAdminErrors(t *testing.T) {
	for k, want := range map[meta.Kind]codes.Code{
		meta.Invalid: codes.InvalidArgument, meta.NotFound: codes.NotFound, meta.Conflict: codes.FailedPrecondition,
		meta.NoLeader: codes.Unavailable, meta.Unknown: codes.Unknown, meta.Timeout: codes.DeadlineExceeded,
	} {
		err := adminError(meta.Errorf(k, "because"))
		if st := status.Convert(err); st.Code() != want || st.Message() != "because" {
			t.Errorf("kind %d: %v, want %v \"because\"", k, err, want)
		}
	}
	if got := adminError(status.Error(codes.PermissionDenied, "no")); status.Code(got) != codes.PermissionDenied {
		t.Errorf("a peer's status: %v, want it unchanged", got)
	}
	if got := adminError(errors.New("boom")); status.Code(got) != codes.Internal {
		t.Errorf("a plain error: %v, want Internal", got)
	}
}
