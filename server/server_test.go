package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

const testConfig = `
limiters:
  - name: api
    rules:
      - name: per-user
        key: [user]
        algorithm: fixed_window
        limit: 3
        window: 1s
        overrides:
          - match: {user: vip}
            limit: 10
      - name: per-org
        key: [org]
        algorithm: token_bucket
        limit: 10
        window: 1s
      - name: dark
        key: [user]
        algorithm: fixed_window
        limit: 2
        window: 1s
        shadow: true
  - name: login
    failure_policy: closed
    rules:
      - {name: per-account, key: [account], algorithm: gcra, limit: 2, window: 1m}
  - name: leases
    rules:
      - {name: per-user, key: [user], algorithm: concurrency, limit: 1, window: 30s}
`

// start is the instant every test's manual clock starts at.
var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type testServer struct {
	*Server
	t     *testing.T
	url   string
	clock *clocktest.Manual
	reg   *prometheus.Registry
}

// newTestServer serves yaml on the memory store (or store, when given) on
// a loopback port, with a manual clock.
func newTestServer(t *testing.T, yaml string, store store.Store, tweak func(*Server)) *testServer {
	t.Helper()
	c, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if store == nil {
		m := memory.New(nil)
		t.Cleanup(func() { m.Close() })
		store = m
	}
	reg := prometheus.NewRegistry()
	clock := clocktest.New(start)
	s := &Server{
		Config:       c,
		Store:        store,
		HTTPAddr:     "127.0.0.1:0",
		GRPCAddr:     "-",
		AdminToken:   "s3cret",
		TicketSecret: []byte("test secret"),
		Registerer:   reg,
		Gatherer:     reg,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock:        clock,
	}
	if tweak != nil {
		tweak(s)
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &testServer{Server: s, t: t, url: "http://" + s.HTTPAddress(), clock: clock, reg: reg}
}

// do sends a request and returns the status and body.
func (ts *testServer) do(method, path, body string, header ...string) (int, http.Header, []byte) {
	ts.t.Helper()
	req, err := http.NewRequest(method, ts.url+path, strings.NewReader(body))
	if err != nil {
		ts.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// decide posts a decision request and decodes the 200 answer.
func (ts *testServer) decide(path, body string) DecisionResponse {
	ts.t.Helper()
	code, _, b := ts.do("POST", path, body)
	if code != http.StatusOK {
		ts.t.Fatalf("POST %s %s: %d %s", path, body, code, b)
	}
	var d DecisionResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		ts.t.Fatalf("decoding %s: %v", b, err)
	}
	return d
}

func TestCheckResponseShape(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	code, h, b := ts.do("POST", "/v1/check", `{"limiter":"api","attributes":{"user":"u1","org":"o1"}}`)
	if code != 200 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, content type %q", code, h.Get("Content-Type"))
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"allowed", "reason", "limit", "capacity", "remaining", "reset_after_ms", "retry_after_ms", "ticket", "rules"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("response lacks %q: %s", k, b)
		}
	}
	var d DecisionResponse
	json.Unmarshal(b, &d)
	want := DecisionResponse{
		Allowed: true, Rule: "per-user", Limit: 3, Capacity: 3, Remaining: 2, ResetAfterMS: 1000,
		Ticket: d.Ticket,
		Rules: []RuleResponse{
			{Name: "per-user", Allowed: true, Limit: 3, Capacity: 3, Remaining: 2, ResetAfterMS: 1000},
			{Name: "per-org", Allowed: true, Limit: 10, Capacity: 10, Remaining: 9, ResetAfterMS: 100},
			{Name: "dark", Allowed: true, Shadow: true, Limit: 2, Capacity: 2, Remaining: 1, ResetAfterMS: 1000},
		},
	}
	if got, _ := json.Marshal(d); !bytes.Equal(got, mustJSON(want)) {
		t.Errorf("decision\n got %s\nwant %s", got, mustJSON(want))
	}
	if d.Ticket == "" {
		t.Error("an admitted decision has no ticket")
	}
}

// TestRuleCapacity: a token bucket's limit is its rate, and its remaining
// counts against its burst, which capacity reports (as overridden), for
// the rule and, when it binds, for the decision.
func TestRuleCapacity(t *testing.T) {
	ts := newTestServer(t, `
limiters:
  - name: bucket
    rules:
      - name: per-user
        key: [user]
        algorithm: token_bucket
        limit: 100
        burst: 200
        window: 1s
        overrides:
          - match: {user: vip}
            limit: 10
      - {name: per-ip, key: [ip], algorithm: sliding_window, limit: 5, window: 1m}
`, nil, nil)
	for _, tc := range []struct {
		body                       string
		limit, capacity, remaining int64
	}{
		{`{"limiter":"bucket","attributes":{"user":"u1"}}`, 100, 200, 199},
		// An override without a burst keeps the rule's burst:limit ratio.
		{`{"limiter":"bucket","attributes":{"user":"vip"}}`, 10, 20, 19},
		{`{"limiter":"bucket","attributes":{"ip":"10.0.0.1"}}`, 5, 5, 4},
	} {
		d := ts.decide("/v1/check", tc.body)
		if len(d.Rules) != 1 {
			t.Fatalf("%s: rules %+v, want one", tc.body, d.Rules)
		}
		if r := d.Rules[0]; r.Limit != tc.limit || r.Capacity != tc.capacity || r.Remaining != tc.remaining {
			t.Errorf("%s: limit %d, capacity %d, remaining %d; want %d, %d, %d",
				tc.body, r.Limit, r.Capacity, r.Remaining, tc.limit, tc.capacity, tc.remaining)
		}
		if d.Limit != tc.limit || d.Capacity != tc.capacity || d.Remaining != tc.remaining {
			t.Errorf("%s: the decision's limit %d, capacity %d, remaining %d; want %d, %d, %d",
				tc.body, d.Limit, d.Capacity, d.Remaining, tc.limit, tc.capacity, tc.remaining)
		}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// TestDenialAndRounding checks a denial (200, reason limit, no ticket) and
// that millisecond values round up.
func TestDenialAndRounding(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	body := `{"limiter":"api","attributes":{"user":"u2"}}`
	for i := 0; i < 3; i++ {
		if d := ts.decide("/v1/check", body); !d.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	ts.clock.Advance(1500 * time.Microsecond) // 998.5ms left in the window
	d := ts.decide("/v1/check", body)
	if d.Allowed || d.Reason != "limit" || d.Ticket != "" || d.Rule != "per-user" {
		t.Errorf("4th request: %+v, want denied by per-user with no ticket", d)
	}
	if d.RetryAfterMS != 999 || d.ResetAfterMS != 999 {
		t.Errorf("retry_after_ms %d reset_after_ms %d, want 999 (998.5 rounded up)", d.RetryAfterMS, d.ResetAfterMS)
	}
	if r := d.Rules[1]; r.Name != "dark" || r.Allowed || !r.Shadow {
		t.Errorf("shadow rule: %+v, want it to report its own denial", r)
	}
	ts.clock.Advance(time.Second)
	if d := ts.decide("/v1/check", body); !d.Allowed {
		t.Errorf("denied after the window rolled: %+v", d)
	}
}

func TestPeekRecordNever(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	peek := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u3"},"cost":0}`)
	if !peek.Allowed || peek.Remaining != 3 || peek.Ticket != "" {
		t.Errorf("peek: %+v, want allowed with 3 remaining and no ticket", peek)
	}
	rec := ts.decide("/v1/record", `{"limiter":"api","attributes":{"user":"u3"},"cost":5}`)
	if rec.Allowed || rec.Remaining != 0 || rec.Ticket != "" {
		t.Errorf("record past the limit: %+v, want not allowed, 0 remaining", rec)
	}
	if d := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u3"}}`); d.Allowed {
		t.Errorf("check after recording past the limit was admitted")
	}
	never := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u4"},"cost":4}`)
	if never.Allowed || !never.Never || never.RetryAfterMS != 0 {
		t.Errorf("cost 4 over limit 3: %+v, want never with no retry", never)
	}
	big := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u5"},"cost":3,"peek":true}`)
	if !big.Allowed || big.Remaining != 3 || big.Ticket != "" {
		t.Errorf("peek at cost 3: %+v, want allowed, nothing charged", big)
	}
	if d := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u5"},"cost":4,"peek":true}`); d.Allowed {
		t.Errorf("peek at cost 4 over limit 3 allowed")
	}
	vip := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"vip"},"cost":4}`)
	if !vip.Allowed || vip.Limit != 10 {
		t.Errorf("vip override: %+v, want limit 10", vip)
	}
}

func TestRefund(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	body := `{"limiter":"leases","attributes":{"user":"u5"}}`
	d := ts.decide("/v1/check", body)
	if !d.Allowed || d.Ticket == "" {
		t.Fatalf("first lease: %+v", d)
	}
	if d2 := ts.decide("/v1/check", body); d2.Allowed {
		t.Fatalf("second lease admitted over limit 1")
	}
	refund := `{"ticket":"` + d.Ticket + `"}`
	if code, _, b := ts.do("POST", "/v1/refund", refund); code != http.StatusNoContent {
		t.Fatalf("refund: %d %s", code, b)
	}
	d3 := ts.decide("/v1/check", body)
	if !d3.Allowed {
		t.Fatalf("lease not released by the refund")
	}
	// A ticket is refunded at most once: the replay gives nothing back.
	if code, _, _ := ts.do("POST", "/v1/refund", refund); code != http.StatusNoContent {
		t.Fatalf("replayed refund: %d", code)
	}
	if d4 := ts.decide("/v1/check", body); d4.Allowed {
		t.Errorf("a replayed refund released a lease")
	}
	applied := testutil.ToFloat64(ts.metrics.refunds.WithLabelValues("leases", "applied"))
	replayed := testutil.ToFloat64(ts.metrics.refunds.WithLabelValues("leases", "replayed"))
	if applied != 1 || replayed != 1 {
		t.Errorf("refunds applied %v, replayed %v; want 1 and 1", applied, replayed)
	}

	// Forged and altered tickets are refused without touching anything.
	raw := []byte(d3.Ticket)
	raw[len(raw)/2] ^= 1
	other, _ := sealTicket([]byte("another secret"), floodgate.Ticket{Limiter: "leases", ID: 9, Cost: 1,
		Entries: []floodgate.TicketEntry{{Rule: "per-user", Key: "u5"}}})
	for _, bad := range []string{string(raw), other, "!!", "AAAA"} {
		code, h, b := ts.do("POST", "/v1/refund", `{"ticket":"`+bad+`"}`)
		if code != http.StatusBadRequest || h.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(b), problemBase+kindInvalidTicket) {
			t.Errorf("ticket %q: %d %s", bad, code, b)
		}
	}
	if d5 := ts.decide("/v1/check", body); d5.Allowed {
		t.Errorf("a forged refund released a lease")
	}
	if got := testutil.ToFloat64(ts.metrics.refunds.WithLabelValues("", "rejected")); got != 4 {
		t.Errorf("rejected refunds = %v, want 4", got)
	}
}

func TestErrors(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, func(s *Server) { s.MaxBodyBytes = 1024 })
	big := `{"limiter":"api","attributes":{"user":"` + strings.Repeat("x", 2000) + `"}}`
	tests := []struct {
		name, method, path, body string
		header                   []string
		status                   int
		kind, detail             string
	}{
		{"unknown limiter", "POST", "/v1/check", `{"limiter":"nope"}`, nil, 404, kindUnknownLimiter, `limiter: no limiter named "nope"; GET /v1/limiters lists them`},
		{"no limiter", "POST", "/v1/check", `{"attributes":{}}`, nil, 400, kindInvalidRequest, "limiter: must be set"},
		{"unknown field", "POST", "/v1/check", `{"limiter":"api","cots":1}`, nil, 400, kindInvalidRequest, `unknown field "cots"; see docs/http-api.md`},
		{"field in another case", "POST", "/v1/check", `{"Limiter":"api"}`, nil, 400, kindInvalidRequest, `unknown field "Limiter" (field names are case-sensitive: "limiter"); see docs/http-api.md`},
		{"field twice", "POST", "/v1/check", `{"limiter":"api","cost":1,"cost":0}`, nil, 400, kindInvalidRequest, "cost: given twice"},
		{"attribute twice", "POST", "/v1/check", `{"limiter":"api","attributes":{"user":"a","user":"b"}}`, nil, 400, kindInvalidRequest, "attributes.user: given twice"},
		{"null attribute", "POST", "/v1/check", `{"limiter":"api","attributes":{"user":null}}`, nil, 400, kindInvalidRequest, "attributes.user: must be a string, got null"},
		{"null usage", "POST", "/v1/record", `{"limiter":"api","usage":{"input":null}}`, nil, 400, kindInvalidRequest, "usage.input: must be a whole number, got null"},
		{"negative cost", "POST", "/v1/check", `{"limiter":"api","cost":-1}`, nil, 400, kindInvalidRequest, "cost: must not be negative, got -1"},
		{"fractional cost", "POST", "/v1/record", `{"limiter":"api","cost":1.5}`, nil, 400, kindInvalidRequest, "cost: must be a whole number, got a JSON number 1.5"},
		{"string cost", "POST", "/v1/check", `{"limiter":"api","cost":"1"}`, nil, 400, kindInvalidRequest, "cost: must be a whole number, got a JSON string"},
		{"number attribute", "POST", "/v1/check", `{"limiter":"api","attributes":{"user":7}}`, nil, 400, kindInvalidRequest, "attributes: must be an object of string values, got a JSON number"},
		{"not an object", "POST", "/v1/check", `[1]`, nil, 400, kindInvalidRequest, "the body must be a JSON object"},
		{"empty body", "POST", "/v1/check", ``, nil, 400, kindInvalidRequest, "the body is empty; it must be a JSON object"},
		{"bad JSON", "POST", "/v1/check", `{"limiter":}`, nil, 400, kindInvalidRequest, "the body is not valid JSON: invalid character '}' looking for beginning of value (at byte 12)"},
		{"truncated", "POST", "/v1/check", `{"limiter":"api"`, nil, 400, kindInvalidRequest, "the body ends in the middle of a JSON value"},
		{"two objects", "POST", "/v1/check", `{"limiter":"api"}{}`, nil, 400, kindInvalidRequest, "the body must hold a single JSON object"},
		{"too large", "POST", "/v1/check", big, nil, 413, kindBodyTooLarge, "the body is larger than 1024 bytes"},
		{"wrong method", "GET", "/v1/check", ``, nil, 405, kindMethod, "/v1/check takes POST, not GET"},
		{"wrong method get", "POST", "/v1/limiters", ``, nil, 405, kindMethod, "/v1/limiters takes GET, HEAD, not POST"},
		{"unknown path", "GET", "/v2/check", ``, nil, 404, kindNotFound, "no endpoint /v2/check; see docs/http-api.md"},
		{"peek on record", "POST", "/v1/record", `{"limiter":"api","peek":true}`, nil, 400, kindInvalidRequest, "peek: only /v1/check peeks"},
		{"no ticket", "POST", "/v1/refund", `{}`, nil, 400, kindInvalidRequest, "ticket: must be set"},
		{"reset without token", "POST", "/v1/reset", `{"limiter":"api"}`, nil, 401, kindUnauthorized, "admin endpoints need an Authorization: Bearer <token> header"},
		{"reset wrong token", "POST", "/v1/reset", `{"limiter":"api"}`, []string{"Authorization", "Bearer nope"}, 401, kindUnauthorized, "the admin token is wrong"},
		{"reset basic auth", "POST", "/v1/reset", `{"limiter":"api"}`, []string{"Authorization", "Basic czNjcmV0"}, 401, kindUnauthorized, "the admin token is wrong"},
		{"reset unknown limiter", "POST", "/v1/reset", `{"limiter":"x"}`, []string{"Authorization", "Bearer s3cret"}, 404, kindUnknownLimiter, `limiter: no limiter named "x"; GET /v1/limiters lists them`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, h, b := ts.do(tt.method, tt.path, tt.body, tt.header...)
			if code != tt.status {
				t.Errorf("status %d, want %d (%s)", code, tt.status, b)
			}
			if ct := h.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("content type %q", ct)
			}
			var p problem
			if err := json.Unmarshal(b, &p); err != nil {
				t.Fatalf("body %s: %v", b, err)
			}
			want := problem{Type: problemBase + tt.kind, Title: http.StatusText(tt.status), Status: tt.status, Detail: tt.detail}
			if p != want {
				t.Errorf("problem\n got %+v\nwant %+v", p, want)
			}
		})
	}
	// Nothing was half applied: the user's quota is whole.
	if d := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1"},"cost":0}`); d.Remaining != 3 {
		t.Errorf("after the bad requests remaining = %d, want 3", d.Remaining)
	}
}

func TestAdmin(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	body := `{"limiter":"api","attributes":{"user":"u6"}}`
	for i := 0; i < 3; i++ {
		ts.decide("/v1/check", body)
	}
	code, _, b := ts.do("POST", "/v1/reset", body, "Authorization", "Bearer s3cret")
	if code != http.StatusNoContent {
		t.Fatalf("reset: %d %s", code, b)
	}
	if d := ts.decide("/v1/check", body); !d.Allowed || d.Remaining != 2 {
		t.Errorf("after reset: %+v, want a fresh window", d)
	}

	off := newTestServer(t, testConfig, nil, func(s *Server) { s.AdminToken = "" })
	code, _, b = off.do("POST", "/v1/reset", body, "Authorization", "Bearer s3cret")
	if code != http.StatusForbidden || !strings.Contains(string(b), kindAdminDisabled) {
		t.Errorf("reset with admin disabled: %d %s", code, b)
	}
}

func TestLimitersHealthReady(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	code, _, b := ts.do("GET", "/v1/limiters", "")
	var out struct {
		Limiters []limiterInfo `json:"limiters"`
	}
	if err := json.Unmarshal(b, &out); code != 200 || err != nil {
		t.Fatalf("%d %s %v", code, b, err)
	}
	if len(out.Limiters) != 3 || out.Limiters[0].Name != "api" || out.Limiters[1].FailurePolicy != "closed" {
		t.Errorf("limiters = %+v", out.Limiters)
	}
	org := out.Limiters[0].Rules[1]
	if org.Algorithm != "token_bucket" || org.Burst != 10 || org.Window != "1s" || org.WindowMS != 1000 {
		t.Errorf("per-org = %+v", org)
	}
	if code, _, b := ts.do("GET", "/healthz", ""); code != 200 || string(b) != "{\"status\":\"ok\"}\n" {
		t.Errorf("healthz: %d %s", code, b)
	}
	if code, _, b := ts.do("GET", "/readyz", ""); code != 200 || !strings.Contains(string(b), `"status":"ready"`) {
		t.Errorf("readyz: %d %s", code, b)
	}
	if code, _, _ := ts.do("HEAD", "/healthz", ""); code != 200 {
		t.Errorf("HEAD /healthz: %d", code)
	}
}

// failingStore is a remote store that is down.
type failingStore struct{ pingErr error }

func (failingStore) Apply(context.Context, *store.Batch) error {
	return errors.New("connection refused")
}
func (f failingStore) Ping(context.Context) error { return f.pingErr }

func TestFailurePolicyAndMetrics(t *testing.T) {
	ts := newTestServer(t, testConfig, failingStore{pingErr: errors.New("dial tcp: connection refused")}, nil)
	open := ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"u1"}}`)
	if !open.Allowed || open.Reason != "store" {
		t.Errorf("api (open): %+v", open)
	}
	for i := 0; i < 5; i++ {
		closed := ts.decide("/v1/check", `{"limiter":"login","attributes":{"account":"a"}}`)
		if closed.Allowed || closed.Reason != "store" || closed.RetryAfterMS < 1000 {
			t.Errorf("login (closed): %+v", closed)
		}
	}
	for _, tt := range []struct {
		limiter, rule, result string
		want                  float64
	}{
		{"api", "per-user", resultFailOpen, 1},
		{"login", "per-account", resultFailClosed, 5},
	} {
		if got := testutil.ToFloat64(ts.metrics.decisions.WithLabelValues(tt.limiter, tt.rule, tt.result)); got != tt.want {
			t.Errorf("decisions{%s,%s,%s} = %v, want %v", tt.limiter, tt.rule, tt.result, got, tt.want)
		}
	}
	// Five failures open login's breaker.
	if n := testutil.CollectAndCount(ts.reg, "floodgate_breaker_state"); n != 3 {
		t.Errorf("breaker series = %d, want 3", n)
	}
	want := `
# HELP floodgate_breaker_state State of each limiter's store circuit breaker: 0 closed, 1 open, 2 half open.
# TYPE floodgate_breaker_state gauge
floodgate_breaker_state{limiter="api"} 0
floodgate_breaker_state{limiter="leases"} 0
floodgate_breaker_state{limiter="login"} 1
`
	if err := testutil.GatherAndCompare(ts.reg, strings.NewReader(want), "floodgate_breaker_state"); err != nil {
		t.Error(err)
	}
	// Six series with error="none" exist from the start, one per store
	// operation; the failures add one with error="other".
	if n := testutil.CollectAndCount(ts.metrics.storeDuration); n != 7 {
		t.Errorf("store duration series = %d, want 7", n)
	}
	// The service still answers as configured (the failure policies):
	// ready, saying how it answers, and floodgate_store_reachable is 0.
	code, _, b := ts.do("GET", "/readyz", "")
	if want := `"store":{"reachable":false,"error":"dial tcp: connection refused","decisions":"failure_policy","fail_closed":["login"]}`; code != http.StatusOK ||
		!strings.Contains(string(b), `"status":"degraded"`) || !strings.Contains(string(b), want) {
		t.Errorf("readyz with the store down: %d %s, want 200, degraded and %s", code, b, want)
	}
	want = `
# HELP floodgate_store_reachable 1 when the store answers a ping (within 250ms), 0 when it does not and the fallback or the failure policy decides.
# TYPE floodgate_store_reachable gauge
floodgate_store_reachable 0
`
	if err := testutil.GatherAndCompare(ts.reg, strings.NewReader(want), "floodgate_store_reachable"); err != nil {
		t.Error(err)
	}
}

// Readiness means the service answers decisions as configured: with a
// fallback, a store that is down leaves it ready, saying the fallback
// decides.
func TestReadinessWithFallback(t *testing.T) {
	fallback := memory.New(nil)
	t.Cleanup(func() { fallback.Close() })
	ts := newTestServer(t, testConfig, failingStore{pingErr: errors.New("dial tcp: connection refused")}, func(s *Server) {
		s.Fallback = fallback
	})
	if d := ts.decide("/v1/check", `{"limiter":"login","attributes":{"account":"a"}}`); !d.Allowed || d.Reason == "store" {
		t.Errorf("login on the fallback: %+v", d)
	}
	code, _, b := ts.do("GET", "/readyz", "")
	if want := `"store":{"reachable":false,"error":"dial tcp: connection refused","decisions":"fallback"}`; code != http.StatusOK || !strings.Contains(string(b), want) {
		t.Errorf("readyz with the store down and a fallback: %d %s, want 200 and %s", code, b, want)
	}
}

func TestDecisionMetrics(t *testing.T) {
	ts := newTestServer(t, testConfig, nil, nil)
	for i := 0; i < 4; i++ {
		ts.decide("/v1/check", `{"limiter":"api","attributes":{"user":"m1"}}`)
	}
	ts.decide("/v1/record", `{"limiter":"api","attributes":{"user":"m2"}}`)
	for _, tt := range []struct {
		rule, result string
		want         float64
	}{
		{"per-user", resultAllowed, 2},
		{"dark", resultShadowDenied, 1},
		{"per-user", resultDenied, 1},
	} {
		if got := testutil.ToFloat64(ts.metrics.decisions.WithLabelValues("api", tt.rule, tt.result)); got != tt.want {
			t.Errorf("decisions{api,%s,%s} = %v, want %v", tt.rule, tt.result, got, tt.want)
		}
	}
	if got := testutil.ToFloat64(ts.metrics.records.WithLabelValues("api")); got != 1 {
		t.Errorf("records = %v, want 1", got)
	}
	code, _, b := ts.do("GET", "/metrics", "")
	if code != 200 || !strings.Contains(string(b), `floodgate_http_requests_total{code="200",handler="check"} 4`) {
		t.Errorf("/metrics: %d, lacks the check request count:\n%s", code, b)
	}
	if strings.Contains(string(b), "m1") {
		t.Error("a key appears in the metrics")
	}
}

// FuzzDecisionRequest checks that no body makes the check endpoint panic or
// answer anything but a decision or a problem.
func FuzzDecisionRequest(f *testing.F) {
	for _, s := range []string{
		`{"limiter":"api","attributes":{"user":"u1","org":"o1"},"cost":1}`,
		`{"limiter":"api","cost":0}`,
		`{"limiter":"leases","attributes":{"user":"x"}}`,
		`{"limiter":"api","attributes":{"user":"vip"},"cost":9007199254740993}`,
		`{"limiter":"api","attributes":null}`,
		`{"ticket":"AQ"}`,
		`[]`, `{`, ``,
	} {
		f.Add(s)
	}
	c, err := config.Parse("test.yaml", []byte(testConfig))
	if err != nil {
		f.Fatal(err)
	}
	store := memory.New(nil)
	defer store.Close()
	reg := prometheus.NewRegistry()
	s := &Server{Config: c, Store: store, HTTPAddr: "127.0.0.1:0", GRPCAddr: "-", Registerer: reg, Gatherer: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := s.Open(); err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/check", "/v1/record", "/v1/refund"} {
			w := httptest.NewRecorder()
			r := httptest.NewRequest("POST", path, strings.NewReader(body))
			h.ServeHTTP(w, r)
			switch w.Code {
			case 200:
				var d DecisionResponse
				if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
					t.Fatalf("%s: 200 with %s", path, w.Body.Bytes())
				}
			case 204:
				if path != "/v1/refund" {
					t.Fatalf("%s: 204", path)
				}
			case 400, 404, 413:
				var p problem
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code {
					t.Fatalf("%s: %d with %s", path, w.Code, w.Body.Bytes())
				}
			default:
				t.Fatalf("%s: status %d for %q", path, w.Code, body)
			}
		}
	})
}

// A request without a keyed rule's attribute skips the rule, counted by
// floodgate_rules_skipped_total; a limiter with require_keys denies it as
// invalid instead, naming the rule.
func TestSkippedRules(t *testing.T) {
	ts := newTestServer(t, testConfig+`
  - name: strict
    require_keys: true
    rules:
      - {name: per-tenant, key: [tenant], algorithm: fixed_window, limit: 5, window: 1m}
`, nil, nil)
	if d := ts.decide("/v1/check", `{"limiter":"api","attributes":{"usr":"typo","org":"acme"}}`); !d.Allowed {
		t.Errorf("api without user: %+v, want admitted by per-org alone", d)
	}
	if d := ts.decide("/v1/check", `{"limiter":"strict","attributes":{"tenant":""}}`); d.Allowed || d.Reason != "invalid" || d.Rule != "per-tenant" {
		t.Errorf("strict without tenant: %+v, want denied as invalid by per-tenant", d)
	}
	want := `
# HELP floodgate_rules_skipped_total Decisions of a configured limiter that skipped a keyed rule because the request had no key for it (an attribute missing or empty), by limiter and rule.
# TYPE floodgate_rules_skipped_total counter
floodgate_rules_skipped_total{limiter="api",rule="dark"} 1
floodgate_rules_skipped_total{limiter="api",rule="per-user"} 1
floodgate_rules_skipped_total{limiter="strict",rule="per-tenant"} 1
`
	if err := testutil.GatherAndCompare(ts.reg, strings.NewReader(want), "floodgate_rules_skipped_total"); err != nil {
		t.Error(err)
	}
}
