package browser

import (
	"strings"
	"testing"
)

func TestTailKeepsTheLastBytes(t *testing.T) {
	tl := newTail(8)
	for _, w := range []string{"abc", "defgh", "ijklmnopq", ""} {
		if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if got := tl.String(); got != "jklmnopq" {
		t.Fatalf("tail holds %q, want the last 8 bytes jklmnopq", got)
	}
	tl.Write([]byte(strings.Repeat("z", 100)))
	if got := tl.String(); got != strings.Repeat("z", 8) {
		t.Fatalf("after a long write the tail holds %q", got)
	}
}
