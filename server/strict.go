package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// strictCheck checks a request body against the shape of v (a pointer to
// the request struct) for what encoding/json lets through: a field name in
// another case ("Limiter"), a field or map key given twice (the last would
// silently win), and null as a map value (an attribute sent as null would
// be taken as absent, skipping the rules keyed on it). It returns nil for
// bodies it cannot read as JSON: decoding them reports the syntax error.
func strictCheck(body []byte, v any) *httpError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	e, _ := walkValue(dec, reflect.TypeOf(v).Elem(), "")
	return e
}

// walkValue reads one JSON value of Go type t from dec. The bool is false
// when the stream is not valid JSON (the caller then stops).
func walkValue(dec *json.Decoder, t reflect.Type, path string) (*httpError, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, false
	}
	delim, isDelim := tok.(json.Delim)
	if !isDelim {
		return nil, true // a scalar or null: decoding judges its type
	}
	switch {
	case delim == '{' && t.Kind() == reflect.Struct:
		return walkObject(dec, path, func(key, p string) (*httpError, bool) {
			f, ok := fieldByTag(t, key)
			if !ok {
				return unknownField(t, key, p), true
			}
			return walkValue(dec, f.Type, p)
		})
	case delim == '{' && t.Kind() == reflect.Map:
		return walkObject(dec, path, func(key, p string) (*httpError, bool) {
			if dec.More() {
				// Peek at null without consuming anything else.
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return nil, false
				}
				if string(raw) == "null" {
					return badRequest(fmt.Sprintf("%s: must be %s, got null", p, describeKind(t.Elem()))), true
				}
				return nil, true
			}
			return nil, false
		})
	case delim == '[':
		elem := t
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if e, ok := walkValue(dec, elem, fmt.Sprintf("%s[%d]", path, i)); e != nil || !ok {
				return e, ok
			}
		}
		_, err := dec.Token()
		return nil, err == nil
	}
	// An object or list where the type wants something else: decoding
	// reports it. Skip over it.
	return nil, skipRest(dec)
}

// walkObject reads the members of an object whose '{' was read, calling
// member for each value after checking its key is not a duplicate.
func walkObject(dec *json.Decoder, path string, member func(key, path string) (*httpError, bool)) (*httpError, bool) {
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := tok.(string)
		p := key
		if path != "" {
			p = path + "." + key
		}
		if seen[key] {
			return badRequest(fmt.Sprintf("%s: given twice", p)), true
		}
		seen[key] = true
		if e, ok := member(key, p); e != nil || !ok {
			return e, ok
		}
	}
	_, err := dec.Token()
	return nil, err == nil
}

// skipRest consumes the rest of an object or list whose opening delimiter
// was read.
func skipRest(dec *json.Decoder) bool {
	for depth := 1; depth > 0; {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return true
}

// fieldByTag finds the field of struct t whose JSON name is exactly key.
func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == key && f.IsExported() {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// unknownField explains a key no field has, naming the field it would be in
// another case.
func unknownField(t reflect.Type, key, path string) *httpError {
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); strings.EqualFold(name, key) {
			return badRequest(fmt.Sprintf("unknown field %q (field names are case-sensitive: %q); see docs/http-api.md", path, name))
		}
	}
	return badRequest(fmt.Sprintf("unknown field %q; see docs/http-api.md", path))
}

func describeKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	}
	return "a value"
}
