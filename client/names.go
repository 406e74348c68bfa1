package client

import (
	"fmt"
	"strings"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// algorithmNames lists the short names of the algorithms, in enum order.
var algorithmNames = []string{
	"token_bucket",
	"gcra",
	"sliding_window",
	"fixed_window",
	"sliding_log",
	"leaky_bucket_policing",
	"leaky_bucket_shaping",
}

// AlgorithmNames returns the short names ParseAlgorithm accepts, in enum
// order (token_bucket first). The slice is the caller's to keep.
func AlgorithmNames() []string {
	return append([]string(nil), algorithmNames...)
}

// ParseAlgorithm returns the algorithm called s: one of AlgorithmNames(), or
// the enum's full name (ALGORITHM_TOKEN_BUCKET). Case and the use of '-' for
// '_' do not matter. ALGORITHM_UNSPECIFIED is not accepted.
func ParseAlgorithm(s string) (quoratev1.Algorithm, error) {
	v, ok := parseEnum(s, "ALGORITHM_", quoratev1.Algorithm_value)
	if !ok {
		return 0, fmt.Errorf("%w %q (want one of %s)", ErrUnknownAlgorithm, s, strings.Join(algorithmNames, ", "))
	}
	return quoratev1.Algorithm(v), nil
}

// AlgorithmName is the inverse of ParseAlgorithm: the short name of a, such as
// "token_bucket". It returns "unspecified" for ALGORITHM_UNSPECIFIED and
// "Algorithm(N)" for a value this package does not know.
func AlgorithmName(a quoratev1.Algorithm) string {
	return enumName(int32(a), "ALGORITHM_", "Algorithm", quoratev1.Algorithm_name)
}

// ParseMode returns the mode called s: "strict" or "leased" (or the enum's
// full name, MODE_STRICT), in any case.
func ParseMode(s string) (quoratev1.Mode, error) {
	v, ok := parseEnum(s, "MODE_", quoratev1.Mode_value)
	if !ok {
		return 0, fmt.Errorf("%w %q (want strict or leased)", ErrUnknownMode, s)
	}
	return quoratev1.Mode(v), nil
}

// ModeName is the inverse of ParseMode: "strict" or "leased".
func ModeName(m quoratev1.Mode) string {
	return enumName(int32(m), "MODE_", "Mode", quoratev1.Mode_name)
}

// ParseFailMode returns the fail mode called s: "open" or "closed" (or the
// enum's full name, FAIL_MODE_OPEN), in any case.
func ParseFailMode(s string) (quoratev1.FailMode, error) {
	v, ok := parseEnum(s, "FAIL_MODE_", quoratev1.FailMode_value)
	if !ok {
		return 0, fmt.Errorf("%w %q (want open or closed)", ErrUnknownFailMode, s)
	}
	return quoratev1.FailMode(v), nil
}

// FailModeName is the inverse of ParseFailMode: "open" or "closed".
func FailModeName(f quoratev1.FailMode) string {
	return enumName(int32(f), "FAIL_MODE_", "FailMode", quoratev1.FailMode_name)
}

// parseEnum looks s up in a generated value map whose names all start with
// prefix, accepting the name with or without the prefix. The zero
// (UNSPECIFIED) value is never accepted: a caller that names nothing should
// leave the field unset instead.
func parseEnum(s, prefix string, values map[string]int32) (int32, bool) {
	name := strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if name == "" {
		return 0, false
	}
	if !strings.HasPrefix(name, prefix) {
		name = prefix + name
	}
	v, ok := values[name]
	if !ok || v == 0 {
		return 0, false
	}
	return v, true
}

// enumName is the short, lower-case name of v in a generated name map, or
// "Type(v)" if v is not in it.
func enumName(v int32, prefix, typ string, names map[int32]string) string {
	name, ok := names[v]
	if !ok {
		return fmt.Sprintf("%s(%d)", typ, v)
	}
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}
