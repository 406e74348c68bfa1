package tenants

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MaxLine bounds a line of an assignments file: two values of at most
// MaxValueLen bytes, written with room to spare.
const MaxLine = 16 << 10

// LineError is a line of an assignments file that was refused.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Reader reads an assignments file as it streams by, holding one line at
// a time. The format is the first non-blank character's: '{' for JSON
// lines ({"tenant_id": "t_1", "plan": "PRO"} a line, no other field),
// anything else for CSV (tenant_id,plan a record, quoted as CSV quotes, an
// optional first line "tenant_id,plan", # comments). Blank lines are
// skipped in both.
type Reader struct {
	next func() (Assignment, int, error)
	line int  // of the last assignment or error
	done bool // a line too long ended the file
}

// NewReader reads the assignments of r.
func NewReader(r io.Reader) *Reader {
	br := bufio.NewReaderSize(r, 64<<10)
	if b, _ := br.Peek(3); string(b) == "\ufeff" {
		_, _ = br.Discard(3) // the byte order mark spreadsheets write
	}
	rd := &Reader{}
	if isJSON(br) {
		sc := bufio.NewScanner(br)
		sc.Buffer(make([]byte, 0, 4096), MaxLine)
		rd.next = func() (Assignment, int, error) { return rd.nextJSON(sc) }
	} else {
		cr := csv.NewReader(br)
		cr.FieldsPerRecord = -1 // counted here, to say what a line should hold
		cr.Comment = '#'
		cr.ReuseRecord = true
		first := true
		rd.next = func() (Assignment, int, error) {
			a, line, err := rd.nextCSV(cr, first)
			first = false
			return a, line, err
		}
	}
	return rd
}

// isJSON peeks at the first non-blank byte.
func isJSON(br *bufio.Reader) bool {
	for n := 1; n <= br.Size(); n++ {
		b, err := br.Peek(n)
		if len(b) < n {
			return false
		}
		if c := b[n-1]; c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c == '{'
		}
		if err != nil {
			return false
		}
	}
	return false
}

// Next returns the next valid assignment and its line, io.EOF after the
// last. A refused line is a *LineError; Next may be called again after
// one, to go on to the following lines, except after a line longer than
// MaxLine, which ends the file.
func (r *Reader) Next() (Assignment, int, error) {
	a, line, err := r.next()
	if err == nil {
		err = Validate(a)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if _, ok := err.(*LineError); !ok {
			err = &LineError{Line: line, Err: err}
		}
	}
	return a, line, err
}

func (r *Reader) nextJSON(sc *bufio.Scanner) (Assignment, int, error) {
	for !r.done && sc.Scan() {
		r.line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if b[0] != '{' {
			return Assignment{}, r.line, errors.New("not a JSON object: the file is JSON lines (its first line is one)")
		}
		var v struct {
			TenantID *string `json:"tenant_id"`
			Plan     *string `json:"plan"`
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return Assignment{}, r.line, fmt.Errorf("not a JSON object of tenant_id and plan: %v", err)
		}
		if d.More() {
			return Assignment{}, r.line, errors.New("more than one JSON value on the line")
		}
		return Assignment{TenantID: deref(v.TenantID), Plan: deref(v.Plan)}, r.line, nil
	}
	if err := sc.Err(); err != nil && !r.done {
		r.done = true
		if errors.Is(err, bufio.ErrTooLong) {
			return Assignment{}, r.line + 1, &LineError{Line: r.line + 1, Err: fmt.Errorf("longer than %d bytes", MaxLine)}
		}
		return Assignment{}, r.line, err
	}
	return Assignment{}, r.line, io.EOF
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (r *Reader) nextCSV(cr *csv.Reader, first bool) (Assignment, int, error) {
	rec, err := cr.Read()
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			r.line = pe.Line
			return Assignment{}, pe.Line, pe.Err
		}
		return Assignment{}, r.line, err
	}
	r.line, _ = cr.FieldPos(0)
	if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
		return r.nextCSV(cr, first) // a blank line
	}
	if first && len(rec) == 2 && strings.EqualFold(strings.TrimSpace(rec[0]), "tenant_id") && strings.EqualFold(strings.TrimSpace(rec[1]), "plan") {
		return r.nextCSV(cr, false) // the header
	}
	if len(rec) != 2 {
		return Assignment{}, r.line, fmt.Errorf("%d fields, want 2: tenant_id,plan", len(rec))
	}
	// Copies: a field shares its line's memory, which a kept assignment
	// would hold on to.
	return Assignment{TenantID: strings.Clone(strings.TrimSpace(rec[0])), Plan: strings.Clone(strings.TrimSpace(rec[1]))}, r.line, nil
}

// Chunks reads r to its end and hands fn its assignments in order, in
// chunks of at most n assignments and maxBytes of EncodedSize, with the
// line of each chunk's last assignment. It stops at the first refused
// line, returning its *LineError: the chunks before it went to fn, the one
// it was in did not. fn's error stops it too, and is returned as it is.
// It holds one chunk at a time: fn must not keep chunk.
func Chunks(r *Reader, n, maxBytes int, fn func(chunk []Assignment, lastLine int) error) error {
	chunk := make([]Assignment, 0, n)
	size, last := 0, 0
	for {
		a, line, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		s := EncodedSize(a)
		if len(chunk) == n || len(chunk) > 0 && size+s > maxBytes {
			if err := fn(chunk, last); err != nil {
				return err
			}
			chunk, size = chunk[:0], 0
		}
		chunk = append(chunk, a)
		size, last = size+s, line
	}
	if len(chunk) == 0 {
		return nil
	}
	return fn(chunk, last)
}
