package server

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// problemBase prefixes the type URI of every problem the API reports; the
// rest names the kind, and docs/http-api.md lists them all.
const problemBase = "urn:floodgate:problem:"

// Problem kinds, the last part of a problem's type.
const (
	kindInvalidRequest = "invalid-request"
	kindUnknownLimiter = "unknown-limiter"
	kindUnknownRoute   = "unknown-route"
	kindInvalidTicket  = "invalid-ticket"
	kindBodyTooLarge   = "body-too-large"
	kindHeaderTooLarge = "header-too-large"
	kindUnauthorized   = "unauthorized"
	kindAdminDisabled  = "admin-disabled"
	kindNotFound       = "not-found"
	kindMethod         = "method-not-allowed"
	kindStore          = "store-unavailable"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// httpError is a failed request: the status and what to tell the client.
type httpError struct {
	status int
	kind   string
	detail string
}

func (e *httpError) Error() string { return e.detail }

func badRequest(detail string) *httpError {
	return &httpError{status: http.StatusBadRequest, kind: kindInvalidRequest, detail: detail}
}

// unknownLimiter is the problem of a request whose field names no limiter.
func unknownLimiter(field, name string) *httpError {
	return &httpError{status: http.StatusNotFound, kind: kindUnknownLimiter,
		detail: fmt.Sprintf("%s: no limiter named %q; GET /v1/limiters lists them", field, name)}
}

// invalidTicket is the problem of a request whose ticket cannot be used.
func invalidTicket(detail string) *httpError {
	return &httpError{status: http.StatusBadRequest, kind: kindInvalidTicket, detail: "ticket: " + detail}
}

// writeProblem answers with e as application/problem+json.
func writeProblem(w http.ResponseWriter, e *httpError) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(problem{
		Type:   problemBase + e.kind,
		Title:  http.StatusText(e.status),
		Status: e.status,
		Detail: e.detail,
	})
}

// writeJSON answers 200 with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeProblem(w, &httpError{status: http.StatusInternalServerError, kind: "internal", detail: "encoding the response failed"})
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
