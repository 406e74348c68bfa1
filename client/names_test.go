package client

import (
	"errors"
	"strings"
	"testing"

	"github.com/quorate/quorate/rpc/quoratev1"
)

func TestParseAlgorithm(t *testing.T) {
	tests := []struct {
		in   string
		want quoratev1.Algorithm
		err  bool
	}{
		{in: "token_bucket", want: quoratev1.Algorithm_ALGORITHM_TOKEN_BUCKET},
		{in: "gcra", want: quoratev1.Algorithm_ALGORITHM_GCRA},
		{in: "sliding_window", want: quoratev1.Algorithm_ALGORITHM_SLIDING_WINDOW},
		{in: "fixed_window", want: quoratev1.Algorithm_ALGORITHM_FIXED_WINDOW},
		{in: "sliding_log", want: quoratev1.Algorithm_ALGORITHM_SLIDING_LOG},
		{in: "leaky_bucket_policing", want: quoratev1.Algorithm_ALGORITHM_LEAKY_BUCKET_POLICING},
		{in: "leaky_bucket_shaping", want: quoratev1.Algorithm_ALGORITHM_LEAKY_BUCKET_SHAPING},
		// Forgiving spellings: case, dashes, surrounding space, the enum's
		// own name as protojson prints it.
		{in: "Token-Bucket", want: quoratev1.Algorithm_ALGORITHM_TOKEN_BUCKET},
		{in: " gcra\n", want: quoratev1.Algorithm_ALGORITHM_GCRA},
		{in: "ALGORITHM_SLIDING_LOG", want: quoratev1.Algorithm_ALGORITHM_SLIDING_LOG},
		// Unspecified is the absence of a choice, never a valid one.
		{in: "unspecified", err: true},
		{in: "ALGORITHM_UNSPECIFIED", err: true},
		{in: "", err: true},
		{in: "leaky_bucket", err: true},
		{in: "token bucket", err: true},
		{in: "1", err: true},
	}
	for _, tt := range tests {
		got, err := ParseAlgorithm(tt.in)
		if tt.err {
			if !errors.Is(err, ErrUnknownAlgorithm) {
				t.Errorf("ParseAlgorithm(%q) = %v, %v; want ErrUnknownAlgorithm", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseAlgorithmErrorListsNames(t *testing.T) {
	_, err := ParseAlgorithm("redis")
	msg := err.Error()
	if !strings.Contains(msg, `"redis"`) {
		t.Errorf("error %q does not quote the input", msg)
	}
	for _, name := range AlgorithmNames() {
		if !strings.Contains(msg, name) {
			t.Errorf("error %q does not list %s", msg, name)
		}
	}
}

func TestAlgorithmNameRoundTrip(t *testing.T) {
	names := AlgorithmNames()
	if len(names) != len(quoratev1.Algorithm_name)-1 {
		t.Fatalf("AlgorithmNames has %d names, the enum %d values besides UNSPECIFIED", len(names), len(quoratev1.Algorithm_name)-1)
	}
	for i, name := range names {
		a, err := ParseAlgorithm(name)
		if err != nil {
			t.Fatalf("ParseAlgorithm(%q): %v", name, err)
		}
		if int(a) != i+1 {
			t.Errorf("AlgorithmNames()[%d] = %q parses to %d; want enum order", i, name, a)
		}
		if got := AlgorithmName(a); got != name {
			t.Errorf("AlgorithmName(%v) = %q; want %q", a, got, name)
		}
	}
	names[0] = "mutated"
	if AlgorithmNames()[0] != "token_bucket" {
		t.Error("AlgorithmNames shares its slice with callers")
	}
}

func TestEnumNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{AlgorithmName(quoratev1.Algorithm_ALGORITHM_UNSPECIFIED), "unspecified"},
		{AlgorithmName(quoratev1.Algorithm(99)), "Algorithm(99)"},
		{ModeName(quoratev1.Mode_MODE_STRICT), "strict"},
		{ModeName(quoratev1.Mode_MODE_LEASED), "leased"},
		{ModeName(quoratev1.Mode(-1)), "Mode(-1)"},
		{FailModeName(quoratev1.FailMode_FAIL_MODE_OPEN), "open"},
		{FailModeName(quoratev1.FailMode_FAIL_MODE_CLOSED), "closed"},
		{FailModeName(quoratev1.FailMode_FAIL_MODE_UNSPECIFIED), "unspecified"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q; want %q", tt.got, tt.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in   string
		want quoratev1.Mode
		err  bool
	}{
		{in: "strict", want: quoratev1.Mode_MODE_STRICT},
		{in: "leased", want: quoratev1.Mode_MODE_LEASED},
		{in: "LEASED", want: quoratev1.Mode_MODE_LEASED},
		{in: "MODE_STRICT", want: quoratev1.Mode_MODE_STRICT},
		{in: "", err: true},
		{in: "unspecified", err: true},
		{in: "lease", err: true},
		{in: "open", err: true},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if tt.err {
			if !errors.Is(err, ErrUnknownMode) || !strings.Contains(err.Error(), "strict or leased") {
				t.Errorf("ParseMode(%q) = %v, %v; want ErrUnknownMode naming the choices", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseFailMode(t *testing.T) {
	tests := []struct {
		in   string
		want quoratev1.FailMode
		err  bool
	}{
		{in: "open", want: quoratev1.FailMode_FAIL_MODE_OPEN},
		{in: "closed", want: quoratev1.FailMode_FAIL_MODE_CLOSED},
		{in: "Closed", want: quoratev1.FailMode_FAIL_MODE_CLOSED},
		{in: "FAIL_MODE_OPEN", want: quoratev1.FailMode_FAIL_MODE_OPEN},
		{in: "fail-mode-closed", want: quoratev1.FailMode_FAIL_MODE_CLOSED},
		{in: "", err: true},
		{in: "close", err: true},
		{in: "strict", err: true},
	}
	for _, tt := range tests {
		got, err := ParseFailMode(tt.in)
		if tt.err {
			if !errors.Is(err, ErrUnknownFailMode) || !strings.Contains(err.Error(), "open or closed") {
				t.Errorf("ParseFailMode(%q) = %v, %v; want ErrUnknownFailMode naming the choices", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseFailMode(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}
