package cliview

import (
	"testing"
	"time"
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
