package envoydriver

import (
	"strings"
	"testing"
	"time"

	"github.com/quorate/quorate/bench"
)

func TestSupports(t *testing.T) {
	for _, tc := range []struct {
		l    bench.Limit
		want string
	}{
		{bench.Limit{Algorithm: "token_bucket", Limit: 100, Period: time.Second}, ""},
		{bench.Limit{Algorithm: "fixed_window", Limit: 50, Period: time.Hour}, ""},
		{bench.Limit{Algorithm: "fixed_window", Limit: 50, Period: 5 * time.Second}, "not an Envoy unit"},
		{bench.Limit{Algorithm: "fixed_window", Limit: 1 << 33, Period: time.Second}, "does not fit requests_per_unit"},
	} {
		err := Supports(&tc.l)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("Supports(%+v) = %v, want %q", tc.l, err, tc.want)
		}
	}
	if _, err := Open(nil, Options{}); err == nil {
		t.Fatal("Open with no addresses")
	}
}
