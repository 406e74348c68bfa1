package quoratev1

import "testing"

func TestLeaderHint(t *testing.T) {
	for _, tt := range []struct {
		shard  int
		leader string
	}{{0, "n1"}, {15, ""}, {4095, "node=with=equals"}} {
		v := FormatLeaderHint(tt.shard, tt.leader)
		s, l, ok := ParseLeaderHint(v)
		if !ok || s != tt.shard || l != tt.leader {
			t.Errorf("ParseLeaderHint(%q) = %d, %q, %v; want %d, %q", v, s, l, ok, tt.shard, tt.leader)
		}
	}
	for _, v := range []string{"", "n1", "=n1", "-1=n1", "x=n1"} {
		if _, _, ok := ParseLeaderHint(v); ok {
			t.Errorf("ParseLeaderHint(%q) ok", v)
		}
	}
}
