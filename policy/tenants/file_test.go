package tenants

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// readAll reads a file to its end, going on past refused lines, as
// "line: tenant plan" and "line: error" rows.
func readAll(t *testing.T, file string) []string {
	t.Helper()
	r := NewReader(strings.NewReader(file))
	var out []string
	for range 100 {
		a, line, err := r.Next()
		var le *LineError
		switch {
		case errors.Is(err, io.EOF):
			return out
		case errors.As(err, &le):
			if le.Line != line {
				t.Errorf("error of line %d returned with line %d", le.Line, line)
			}
			out = append(out, err.Error())
		case err != nil:
			t.Fatalf("not a line's error: %v", err)
		default:
			out = append(out, fmt.Sprintf("line %d: %s %s", line, a.TenantID, a.Plan))
		}
	}
	t.Fatal("no end")
	return nil
}

func TestReader(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"csv with a header", "tenant_id,plan\nt_1,FREE\n\n# a comment\n t_2 , plan_pro\n\"t,3\",\"PRO\"\n",
			[]string{"line 2: t_1 FREE", "line 5: t_2 plan_pro", `line 6: t,3 PRO`}},
		{"csv without one, a BOM, CRLF", "\ufeffTENANT_ID,Plan\r\nt_1,FREE\r\n", []string{"line 2: t_1 FREE"}},
		{"csv: not the first line's header", "t_1,FREE\ntenant_id,plan\n", []string{"line 1: t_1 FREE", "line 2: tenant_id plan"}},
		{"csv errors go on", "t_1\nt_2,PRO,x\n,PRO\nt_3,\nt_4,PRO\n", []string{
			"line 1: 1 fields, want 2: tenant_id,plan",
			"line 2: 3 fields, want 2: tenant_id,plan",
			"line 3: tenants: tenant_id: required",
			"line 4: tenants: plan: required",
			"line 5: t_4 PRO"}},
		{"csv: a bare quote", "t_1,FREE\nt\"2,PRO\nt_3,PRO\n", []string{"line 1: t_1 FREE", `line 2: bare " in non-quoted-field`, "line 3: t_3 PRO"}},
		{"json lines", "\n  {\"tenant_id\": \"t_1\", \"plan\": \"PRO\"}\n\n{\"plan\":\"FREE\",\"tenant_id\":\"t\\u00e9\"}\n", []string{
			"line 2: t_1 PRO", "line 4: té FREE"}},
		{"json errors go on", "{\"tenant_id\":\"t_1\"}\n{\"tenant_id\":\"t_2\",\"plan\":\"PRO\",\"tier\":\"x\"}\nt_3,PRO\n{\"tenant_id\":\"t_4\",\"plan\":\"PRO\"} {}\n{\"tenant_id\":\"t_5\",\"plan\":\"PRO\"}\n", []string{
			"line 1: tenants: plan: required",
			`line 2: not a JSON object of tenant_id and plan: json: unknown field "tier"`,
			"line 3: not a JSON object: the file is JSON lines (its first line is one)",
			"line 4: more than one JSON value on the line",
			"line 5: t_5 PRO"}},
		{"empty", "\n \n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readAll(t, tc.file)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestReaderLongLine: a line past MaxLine ends a JSON lines file with an
// error naming it, rather than a buffer without bound.
func TestReaderLongLine(t *testing.T) {
	file := "{\"tenant_id\":\"t_1\",\"plan\":\"PRO\"}\n{\"tenant_id\":\"" + strings.Repeat("x", MaxLine) + "\"}\n"
	got := readAll(t, file)
	if len(got) != 2 || got[1] != fmt.Sprintf("line 2: longer than %d bytes", MaxLine) {
		t.Errorf("%.200q", got)
	}
}

// TestChunks: chunks end at n assignments or maxBytes, whichever comes
// first, and a refused line stops the file with the chunk it is in
// undelivered.
func TestChunks(t *testing.T) {
	var b strings.Builder
	for i := range 10 {
		fmt.Fprintf(&b, "t_%d,P\n", i) // 13 bytes each: ["t_0","P"],
	}
	chunks := func(file string, n, maxBytes int) (string, error) {
		var out []string
		err := Chunks(NewReader(strings.NewReader(file)), n, maxBytes, func(c []Assignment, last int) error {
			out = append(out, fmt.Sprintf("%d..%d@%d", c[0].TenantID[2]-'0', c[len(c)-1].TenantID[2]-'0', last))
			return nil
		})
		return strings.Join(out, " "), err
	}
	for _, tc := range []struct {
		n, maxBytes int
		want        string
	}{
		{4, 1 << 20, "0..3@4 4..7@8 8..9@10"},
		{100, 40, "0..2@3 3..5@6 6..8@9 9..9@10"},
		{100, 1, "0..0@1 1..1@2 2..2@3 3..3@4 4..4@5 5..5@6 6..6@7 7..7@8 8..8@9 9..9@10"},
	} {
		if got, err := chunks(b.String(), tc.n, tc.maxBytes); got != tc.want || err != nil {
			t.Errorf("n=%d maxBytes=%d: %s (%v); want %s", tc.n, tc.maxBytes, got, err, tc.want)
		}
	}
	bad := strings.Replace(b.String(), "t_6,P", "t_6,", 1)
	got, err := chunks(bad, 4, 1<<20)
	var le *LineError
	if got != "0..3@4" || !errors.As(err, &le) || le.Line != 7 {
		t.Errorf("a bad line 7: delivered %s, %v; want 0..3@4 and line 7's error", got, err)
	}
	stop := errors.New("stop")
	n := 0
	err = Chunks(NewReader(strings.NewReader(b.String())), 4, 1<<20, func([]Assignment, int) error { n++; return stop })
	if err != stop || n != 1 {
		t.Errorf("fn's error: %v after %d chunks; want it after 1", err, n)
	}
}
