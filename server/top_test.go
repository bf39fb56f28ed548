package server

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/topkeys"
)

func TestTopEndpoint(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	for i := 0; i < 7; i++ { // per-user allows 3: 4 denials
		ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"mallory","org":"acme"}}`)
	}
	ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"alice","org":"acme"}}`)
	auth := []string{"Authorization", "Bearer s3cret"}

	code, _, b := ts.do("GET", "/v1/top?limiter=api&rule=per-user&span=1m", "", auth...)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/top: %d %s", code, b)
	}
	var got topResponse
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"limiter":"api","kind":"denials","span":"1m0s","since":"2026-01-02T03:03:00Z","rules":[` +
		`{"rule":"per-user","limit":3,"window":"1s","shadow":false,"total":4,"keys":[` +
		`{"key":"mallory","denials":4,"denials_error":0,"decisions":7,"decisions_error":0}]}]}`
	if s := strings.TrimSpace(string(b)); s != want {
		t.Errorf("GET /v1/top:\n got %s\nwant %s", s, want)
	}

	// Every rule, by decisions; the shadow rule "dark" (limit 2) would
	// have denied mallory 5 times.
	code, _, b = ts.do("GET", "/v1/top?limiter=api&kind=decisions&n=1", "", auth...)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/top kind=decisions: %d %s", code, b)
	}
	got = topResponse{}
	json.Unmarshal(b, &got)
	if len(got.Rules) != 3 || got.Span != "5m0s" {
		t.Fatalf("rules %+v span %s, want the 3 rules over 5m", got.Rules, got.Span)
	}
	// A span is counted in whole minutes, rounded up, and echoed so.
	if _, _, b := ts.do("GET", "/v1/top?limiter=api&span=90s", "", auth...); !strings.Contains(string(b), `"span":"2m0s"`) {
		t.Errorf("span=90s: %s, want the span echoed as 2m0s", b)
	}
	for _, r := range got.Rules {
		if len(r.Keys) != 1 {
			t.Fatalf("rule %s: keys %+v, want n=1", r.Rule, r.Keys)
		}
		k := r.Keys[0]
		switch r.Rule {
		case "per-org":
			if k.Key != "acme" || k.Decisions != 8 || k.Denials != 0 {
				t.Errorf("per-org: %+v, want acme with 8 decisions", k)
			}
		case "dark":
			if k.Key != "mallory" || k.Decisions != 7 || k.Denials != 5 || !r.Shadow {
				t.Errorf("dark: %+v (shadow %v), want mallory 7 decisions, 5 would-be denials", k, r.Shadow)
			}
		}
	}

	for _, tc := range []struct {
		query  string
		header []string
		code   int
		kind   string
	}{
		{"limiter=api", nil, 401, kindUnauthorized},
		{"limiter=api", []string{"Authorization", "Bearer wrong"}, 401, kindUnauthorized},
		{"", auth, 400, kindInvalidRequest},
		{"limiter=nope", auth, 404, kindUnknownLimiter},
		{"limiter=api&rule=nope", auth, 404, kindUnknownRule},
		{"limiter=api&span=16m", auth, 400, kindInvalidRequest},
		{"limiter=api&span=soon", auth, 400, kindInvalidRequest},
		{"limiter=api&kind=allowed", auth, 400, kindInvalidRequest},
		{"limiter=api&n=0", auth, 400, kindInvalidRequest},
		{"limiter=api&n=101", auth, 400, kindInvalidRequest},
	} {
		code, _, b := ts.do("GET", "/v1/top?"+tc.query, "", tc.header...)
		if code != tc.code || !strings.Contains(string(b), problemBase+tc.kind) {
			t.Errorf("GET /v1/top?%s: %d %s, want %d %s", tc.query, code, b, tc.code, tc.kind)
		}
	}
	off := newTestServer(t, testConfig, nil, func(s *Server) { s.AdminToken = "" })
	if code, _, b := off.do("GET", "/v1/top?limiter=api", "", auth...); code != http.StatusForbidden {
		t.Errorf("admin disabled: %d %s, want 403", code, b)
	}
}

func TestStatusPage(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	for i := 0; i < 5; i++ {
		ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"mallory"}}`)
	}
	// The page takes the admin token as a bearer token or as the password
	// of basic authentication, and asks a browser for it.
	code, h, _ := ts.do("GET", "/status/", "")
	if code != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic ") {
		t.Errorf("no credentials: %d, WWW-Authenticate %q; want 401 asking for basic auth", code, h.Get("WWW-Authenticate"))
	}
	for _, auth := range [][]string{
		{"Authorization", "Bearer s3cret"},
		{"Authorization", "Basic " + basic("anyone", "s3cret")},
	} {
		code, h, b := ts.do("GET", "/status/", "", auth...)
		if code != http.StatusOK || !strings.Contains(string(b), `<script src="uPlot.iife.min.js">`) || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
			t.Errorf("GET /status/ with %s: %d %s", auth[1], code, b)
		}
	}
	if code, _, _ := ts.do("GET", "/status/", "", "Authorization", "Basic "+basic("x", "wrong")); code != http.StatusUnauthorized {
		t.Errorf("wrong password: %d, want 401", code)
	}
	for _, asset := range []string{"app.js", "style.css", "uPlot.iife.min.js", "uPlot.min.css", "uPlot.LICENSE"} {
		if code, _, b := ts.do("GET", "/status/"+asset, "", "Authorization", "Bearer s3cret"); code != http.StatusOK || len(b) == 0 {
			t.Errorf("GET /status/%s: %d (%d bytes)", asset, code, len(b))
		}
	}

	code, _, b := ts.do("GET", "/status/data?span=1m", "", "Authorization", "Bearer s3cret")
	if code != http.StatusOK {
		t.Fatalf("GET /status/data: %d %s", code, b)
	}
	var d statusData
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Limiters) != 3 || d.Limiters[0].Name != "api" || d.Config.Limiters != 3 || d.Span != "1m0s" {
		t.Fatalf("status data %s", b)
	}
	api := d.Limiters[0]
	if len(api.Rates) != len(results) || len(api.Rates[0]) != rateSeconds || api.Breaker != "closed" {
		t.Errorf("api: %d series of %d seconds, breaker %s", len(api.Rates), len(api.Rates[0]), api.Breaker)
	}
	if r := api.Rules[0]; r.Rule != "per-user" || len(r.Keys) != 1 || r.Keys[0].Key != "mallory" || r.Keys[0].Denials != 2 {
		t.Errorf("per-user: %+v, want mallory denied twice", r)
	}
}

// basic returns the credentials of an Authorization: Basic header.
func basic(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func TestRatesRing(t *testing.T) {
	var r rates
	for i := 0; i < 3; i++ {
		r.add("api", 0, 1000)
	}
	r.add("api", 1, 1001)
	r.add("api", 1, 1001+rateSeconds)           // reuses 1001's second
	got := r.series("api", 1002+rateSeconds, 3) // seconds 999+rateSeconds..1001+rateSeconds
	if got[0][0] != 0 || got[1][2] != 1 {
		t.Errorf("series %v: want only the denial at 1001+rateSeconds", got)
	}
	got = r.series("api", 1002, 2)
	if got[0][0] != 3 || got[1][1] != 0 {
		t.Errorf("series %v: want 3 allowed at 1000, nothing left at 1001 (reused)", got)
	}
}

// TestTopAfterReload: a reload that keeps a rule keeps its top keys; one
// that drops the rule drops them, and /v1/top no longer knows it.
func TestTopAfterReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, limitConfig(1))
	ts := newTestServer(t, limitConfig(1), nil, func(s *Server) { s.ConfigPath = path })
	for i := 0; i < 3; i++ {
		ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"mallory"}}`)
	}
	denials := func() int64 {
		rep, _ := ts.live.tops.Top("api", "per-user", topkeys.Denials, time.Minute, 1)
		if len(rep.Entries) == 0 {
			return 0
		}
		return rep.Entries[0].Count
	}
	writeFile(t, path, limitConfig(2))
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := denials(); got != 2 {
		t.Errorf("after a reload keeping per-user: %d denials, want 2", got)
	}
	writeFile(t, path, strings.ReplaceAll(limitConfig(2), "per-user", "per-account"))
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := denials(); got != 0 {
		t.Errorf("after a reload dropping per-user: %d denials kept, want 0", got)
	}
}
