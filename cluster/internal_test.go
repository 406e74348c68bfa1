package cluster

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quorate/quorate/cluster/meta"
)

// TestPeerErrors: a node's error crosses the peer port and comes back the
// same kind with the same message; a code no kind has passes unchanged.
func TestPeerErrors(t *testing.T) {
	for k := meta.Invalid; k <= meta.Timeout; k++ {
		back := fromPeer(toPeer(meta.Errorf(k, "why %d", k)))
		var me *meta.Error
		if !errors.As(back, &me) || me.Kind != k || me.Msg != "why "+string(rune('0'+k)) {
			t.Errorf("kind %d came back as %v", k, back)
		}
	}
	denied := status.Error(codes.PermissionDenied, "no")
	if got := fromPeer(denied); status.Code(got) != codes.PermissionDenied {
		t.Errorf("PermissionDenied came back as %v", got)
	}
	if got := toPeer(errors.New("boom")); status.Code(got) != codes.Internal {
		t.Errorf("a plain error went to the peer as %v, want Internal", got)
	}
}
