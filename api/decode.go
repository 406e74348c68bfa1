package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// readBody reads r's body, at most max bytes.
func readBody(w http.ResponseWriter, r *http.Request, max int64) ([]byte, *fieldError) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if isTooLarge(err) {
		return nil, &fieldError{status: http.StatusRequestEntityTooLarge, field: "body",
			msg: fmt.Sprintf("larger than %d bytes", max)}
	}
	if err != nil {
		return nil, badField("body", "cannot read it: %v", err)
	}
	return b, nil
}

// decodeJSON decodes body, one JSON object, into v (a pointer to a struct),
// refusing unknown fields, and names what is wrong with it.
func decodeJSON(body []byte, v any) *fieldError {
	return decodeStrict(body, v, true)
}

// decodeLenient decodes body like decodeJSON but ignores fields v does not
// have, returning their paths (at most maxUnknown): a gateway that adds a
// field to the decision contract must not break.
func decodeLenient(body []byte, v any) ([]string, *fieldError) {
	if err := decodeStrict(body, v, false); err != nil {
		return nil, err
	}
	var unknown []string
	unknownPaths(body, reflect.TypeOf(v), "", &unknown)
	return unknown, nil
}

const maxUnknown = 32

func decodeStrict(body []byte, v any, strict bool) *fieldError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badField("body", "empty: want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return jsonError(body, reflect.TypeOf(v).Elem(), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return badField("body", "malformed JSON: data after the object at byte offset %d", dec.InputOffset())
	}
	return nil
}

func jsonError(body []byte, t reflect.Type, err error) *fieldError {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badField("body", "malformed JSON at byte offset %d: %s", se.Offset, se.Error())
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badField("body", "malformed JSON: it ends at byte offset %d, inside a value", len(body))
	case errors.As(err, &te):
		if te.Field == "" {
			return badField("body", "want a JSON object, got %s", te.Value)
		}
		return badField(te.Field, "want %s, got %s", jsonType(te.Type), te.Value)
	}
	// encoding/json names an unknown field without its path.
	if q, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ := strconv.Unquote(q)
		path, ok := findUnknown(body, t, name)
		if !ok {
			path = pathKey(name)
		}
		return badField(path, "unknown field")
	}
	return badField("body", "%v", err)
}

// findUnknown is the path of a field called name in raw that t does not
// have.
func findUnknown(raw []byte, t reflect.Type, name string) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var m map[string]json.RawMessage
	if t.Kind() != reflect.Struct || json.Unmarshal(raw, &m) != nil {
		return "", false
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		f, known := fieldByJSONName(t, k)
		if !known {
			if k == name {
				return pathKey(k), true
			}
			continue
		}
		if p, ok := findUnknown(m[k], f.Type, name); ok {
			return k + "." + p, true
		}
	}
	return "", false
}

// unknownPaths appends the paths of the fields in raw that t does not have
// (at most maxUnknown), under prefix.
func unknownPaths(raw []byte, t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var m map[string]json.RawMessage
	if t.Kind() != reflect.Struct || json.Unmarshal(raw, &m) != nil {
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if len(*out) >= maxUnknown {
			return
		}
		if f, known := fieldByJSONName(t, k); known {
			unknownPaths(m[k], f.Type, prefix+k+".", out)
		} else {
			*out = append(*out, prefix+pathKey(k))
		}
	}
}

// pathKey shows an empty key, which JSON allows, as "".
func pathKey(k string) string {
	if k == "" {
		return `""`
	}
	return k
}

// fieldByJSONName finds the field encoding/json decodes key into: the tag's
// name, compared as it compares them (case-insensitively).
func fieldByJSONName(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if strings.EqualFold(name, key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func jsonType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonType(t.Elem())
	}
	return t.String()
}
