package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// decode reads r's JSON body into v: one object, no unknown fields, field
// names in their exact case, none twice, no null map values (see
// strictCheck), at most MaxBodyBytes.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) *httpError {
	return decodeJSON(http.MaxBytesReader(w, r.Body, s.MaxBodyBytes), v, s.MaxBodyBytes)
}

func decodeJSON(body io.Reader, v any, limit int64) *httpError {
	data, err := io.ReadAll(body)
	if err != nil {
		return jsonError(err, limit)
	}
	if e := strictCheck(data, v); e != nil {
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return jsonError(err, limit)
		}
		return badRequest("the body must hold a single JSON object")
	}
	return nil
}

// jsonError explains a decoding error to the client.
func jsonError(err error, limit int64) *httpError {
	var (
		tooBig *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooBig):
		return &httpError{status: http.StatusRequestEntityTooLarge, kind: kindBodyTooLarge,
			detail: fmt.Sprintf("the body is larger than %d bytes", limit)}
	case errors.Is(err, io.EOF):
		return badRequest("the body is empty; it must be a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("the body ends in the middle of a JSON value")
	case errors.As(err, &syntax):
		return badRequest(fmt.Sprintf("the body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("the body must be a JSON object")
		}
		want := "a string"
		switch typ.Type.Kind().String() {
		case "int64":
			want = "a whole number"
		case "map":
			want = "an object of string values"
		}
		field := typ.Field
		if field == "attributes" || strings.HasPrefix(field, "attributes.") {
			field = "attributes"
			want = "an object of string values"
		}
		return badRequest(fmt.Sprintf("%s: must be %s, got a JSON %s", field, want, typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest(strings.TrimPrefix(err.Error(), "json: ") + "; see docs/http-api.md")
	}
	return badRequest(fmt.Sprintf("the body is not a valid request: %v", err))
}
