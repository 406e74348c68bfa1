package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// apiError is the body of every answer that is not a success:
// {"error": {"code", "field", "message"}}.
type apiError struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// fieldError is bad input found before the backend was called.
type fieldError struct {
	status int // 400 unless the body was too large
	field  string
	msg    string
}

func (e *fieldError) Error() string {
	if e.field == "" {
		return e.msg
	}
	return e.field + ": " + e.msg
}

func badField(field, format string, args ...any) *fieldError {
	return &fieldError{status: http.StatusBadRequest, field: field, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, code int, e apiError) {
	writeJSON(w, code, struct {
		Error apiError `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // diffs hold "->", and nobody puts this in HTML
	if err := enc.Encode(v); err != nil {
		code = http.StatusInternalServerError
		b.Reset()
		b.WriteString(`{"error":{"code":"INTERNAL","message":"api: cannot encode the answer"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}

// writeFieldError answers bad input: 400 (413 for a body over its bound)
// naming the field.
func writeFieldError(w http.ResponseWriter, e *fieldError) {
	code := "INVALID_ARGUMENT"
	if e.status == http.StatusRequestEntityTooLarge {
		code = "RESOURCE_EXHAUSTED"
	}
	writeError(w, e.status, apiError{Code: code, Field: e.field, Message: e.Error()})
}

// grpcHTTP maps the backend's gRPC codes to HTTP statuses; the rest are 500.
var grpcHTTP = map[codes.Code]int{
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.Unauthenticated:    http.StatusUnauthorized,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.FailedPrecondition: http.StatusConflict,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.Canceled:           499, // nginx's "client closed request": nobody reads it anyway
}

// writeRPCError answers a backend error with its HTTP status, the gRPC
// code's name and, for InvalidArgument, the field it names, renamed by
// field (proto names to the route's JSON paths).
func writeRPCError(w http.ResponseWriter, err error, field func(string) string) {
	st := status.Convert(err)
	code, ok := grpcHTTP[st.Code()]
	if !ok {
		code = http.StatusInternalServerError
	}
	e := apiError{Code: codeName(st.Code()), Message: st.Message()}
	if v := violation(st); v != nil {
		e.Field = field(v.GetField())
		e.Message = e.Field + ": " + v.GetDescription()
	}
	writeError(w, code, e)
}

func violation(st *status.Status) *errdetails.BadRequest_FieldViolation {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0]
		}
	}
	return nil
}

// codeName is the gRPC code as the google.rpc.Code enum spells it
// (INVALID_ARGUMENT), the form HTTP APIs of gRPC services use.
func codeName(c codes.Code) string {
	var b strings.Builder
	prev := ' '
	for _, r := range c.String() {
		if unicode.IsUpper(r) && unicode.IsLower(prev) {
			b.WriteByte('_')
		}
		b.WriteRune(r)
		prev = r
	}
	return strings.ToUpper(b.String())
}

func sameField(f string) string { return f }

// isTooLarge tells a body over its http.MaxBytesReader bound.
func isTooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}
