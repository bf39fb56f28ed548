package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestAdminRefusalsSayWhy checks every admin endpoint the server lists: a
// refusal is a problem+json body that says why (no token configured, or a
// missing or wrong one), and a browser opening the status page gets the
// same reason as a page it can show.
func TestAdminRefusalsSayWhy(t *testing.T) {
	on := newTestServer(t, testConfig, nil, nil)
	off := newTestServer(t, testConfig, nil, func(s *Server) { s.AdminToken = "" })
	if got, want := on.AdminEndpoints(), []string{"POST /v1/reset", "GET /v1/top", "GET /status/"}; !slices.Equal(got, want) {
		t.Errorf("AdminEndpoints() = %q, want %q", got, want)
	}
	body := `{"limiter":"api","attributes":{"user":"u1"}}`
	for _, ep := range on.AdminEndpoints() {
		method, path, _ := strings.Cut(ep, " ")
		if path == "/v1/top" {
			path += "?limiter=api"
		}
		for _, tc := range []struct {
			name   string
			ts     *testServer
			header []string
			status int
			kind   string
			detail string
		}{
			{"no token configured", off, []string{"Authorization", "Bearer s3cret"}, 403, kindAdminDisabled,
				"admin endpoints are disabled: no admin token is configured; start the service with --admin-token or FLOODGATE_ADMIN_TOKEN"},
			{"no token given", on, nil, 401, kindUnauthorized, ""},
			{"wrong token", on, []string{"Authorization", "Bearer nope"}, 401, kindUnauthorized, "the admin token is wrong"},
		} {
			code, h, b := tc.ts.do(method, path, body, tc.header...)
			var p problem
			if err := json.Unmarshal(b, &p); err != nil || code != tc.status || h.Get("Content-Type") != "application/problem+json" ||
				p.Type != problemBase+tc.kind || p.Detail == "" || tc.detail != "" && p.Detail != tc.detail {
				t.Errorf("%s, %s: %d %s %s, want %d %s with the detail %q", ep, tc.name, code, h.Get("Content-Type"), b, tc.status, tc.kind, tc.detail)
			}
		}
	}

	// A browser opening the status page.
	html := []string{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}
	for _, tc := range []struct {
		name   string
		ts     *testServer
		header []string
		status int
		detail string
	}{
		{"no token configured", off, html, 403, "no admin token is configured; start the service with --admin-token or FLOODGATE_ADMIN_TOKEN."},
		{"no password", on, html, 401, "the status page needs the admin token, as a bearer token or as the password of basic authentication."},
		{"wrong password", on, append([]string{"Authorization", "Basic " + basic("me", "nope")}, html...), 401, "the password is not the admin token."},
	} {
		code, h, b := tc.ts.do("GET", "/status/", "", tc.header...)
		if code != tc.status || !strings.HasPrefix(h.Get("Content-Type"), "text/html") || !strings.Contains(string(b), tc.detail) {
			t.Errorf("browser, %s: %d %s\n%s\nwant %d, an HTML page saying %q", tc.name, code, h.Get("Content-Type"), b, tc.status, tc.detail)
		}
		if tc.status == 401 && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("browser, %s: WWW-Authenticate %q, want Basic", tc.name, h.Get("WWW-Authenticate"))
		}
	}
	// The page's own data requests get problem+json.
	if code, h, _ := off.do("GET", "/status/data", "", "Accept", "*/*"); code != 403 || h.Get("Content-Type") != "application/problem+json" {
		t.Errorf("GET /status/data with admin disabled: %d %s, want 403 problem+json", code, h.Get("Content-Type"))
	}
}
