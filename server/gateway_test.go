package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

const gatewayConfig = `
token_classes: {input: 1, output: 3, cached_input: 0}
limiters:
  - name: route-primary
    token_rules: [tpm]
    rules:
      - {name: rpm, key: [route], algorithm: sliding_window, limit: 1, window: 1m}
      - {name: tpm, key: [route], algorithm: sliding_window, limit: 100, window: 1m}
  - name: route-backup
    token_rules: [tpm]
    rules:
      - {name: rpm, key: [route], algorithm: sliding_window, limit: 2, window: 1h}
      - {name: tpm, key: [route], algorithm: sliding_window, limit: 100, window: 1h}
  - name: keys
    rules:
      - {name: rpm, key: [api_key], algorithm: fixed_window, limit: 10, window: 1m}
routes:
  - name: chat
    candidates:
      - {name: primary, limiter: route-primary, attributes: {route: primary}}
      - {name: backup, limiter: route-backup, attributes: {route: backup}}
`

// selectOK posts a selection and decodes its 200 answer strictly.
func (ts *testServer) selectOK(body string) selectResponse {
	ts.t.Helper()
	code, _, b := ts.do("POST", "/v1/select", body)
	if code != 200 {
		ts.t.Fatalf("POST /v1/select %s: %d %s", body, code, b)
	}
	var out selectResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		ts.t.Fatalf("decoding %s: %v", b, err)
	}
	return out
}

func TestSelect(t *testing.T) {
	ts := newTestServer(t, gatewayConfig, nil, nil)
	first := ts.selectOK(`{"route":"chat"}`)
	if !first.Allowed || first.Candidate != "primary" || first.Index != 0 || first.Decision == nil ||
		first.Decision.Ticket == "" || first.Capped != 0 || len(first.Skipped) != 0 {
		t.Fatalf("first: %+v", first)
	}
	ts.clock.Advance(10 * time.Second)
	// primary is at its rpm cap: skipped, not charged, and backup serves.
	second := ts.selectOK(`{"route":"chat"}`)
	if !second.Allowed || second.Candidate != "backup" || second.Index != 1 || second.RetryAfterMS != 0 || second.Capped != 1 {
		t.Fatalf("second: %+v", second)
	}
	if got, want := fmt.Sprintf("%+v", second.Skipped), "[{Name:primary Index:0 Limiter:route-primary Reason:limit Caps:[rpm] RetryAfterMS:50000 Never:false}]"; got != want {
		t.Errorf("skipped = %s, want %s", got, want)
	}
	// Failover: the caller excludes what failed; its attempt stays counted.
	failover := ts.selectOK(`{"route":"chat","exclude":["backup"]}`)
	if failover.Allowed || failover.Index != -1 || failover.Candidate != "" || failover.Decision != nil ||
		failover.RetryAfterMS != 50000 || failover.Capped != 1 {
		t.Errorf("backup excluded, primary capped: %+v", failover)
	}
	if d := ts.decide("/v1/check", `{"limiter":"route-backup","attributes":{"route":"backup"},"cost":0}`); d.Rules[0].Remaining != 1 {
		t.Errorf("backup rpm remaining %d, want 1: the excluded attempt must stay counted", d.Rules[0].Remaining)
	}
	ts.selectOK(`{"route":"chat"}`) // backup's last
	// Everything capped: the earliest retry-after among them (primary's
	// minute, not backup's hour).
	ts.clock.Advance(5 * time.Second)
	none := ts.selectOK(`{"route":"chat"}`)
	if none.Allowed || none.Capped != 2 || none.RetryAfterMS != 45000 || len(none.Skipped) != 2 ||
		none.Skipped[1].RetryAfterMS <= 45000 || strings.Join(none.Skipped[1].Caps, ",") != "rpm" {
		t.Errorf("all capped: %+v", none)
	}
	// Everything excluded: nothing capped, nothing to wait for.
	exhausted := ts.selectOK(`{"route":"chat","exclude":["primary","backup"]}`)
	if exhausted.Allowed || exhausted.Capped != 0 || exhausted.RetryAfterMS != 0 || len(exhausted.Skipped) != 0 {
		t.Errorf("all excluded: %+v", exhausted)
	}
	// Inline candidates, with request attributes under the candidate's own.
	inline := ts.selectOK(`{"candidates":[{"limiter":"keys","attributes":{"api_key":"own"}},{"limiter":"keys"}],"attributes":{"api_key":"k1"},"exclude":[]}`)
	if !inline.Allowed || inline.Candidate != "keys" || inline.Index != 0 {
		t.Errorf("inline: %+v", inline)
	}
	if d := ts.decide("/v1/check", `{"limiter":"keys","attributes":{"api_key":"own"},"cost":0}`); d.Remaining != 9 {
		t.Errorf("the candidate's own attribute was not used: %+v", d)
	}
	never := ts.selectOK(`{"candidates":[{"limiter":"keys","cost":11}],"attributes":{"api_key":"k2"}}`)
	if never.Allowed || !never.Never || never.RetryAfterMS != 0 || !never.Skipped[0].Never {
		t.Errorf("cost over the limit: %+v", never)
	}
	for result, want := range map[string]float64{"admitted": 3, "capped": 2, "exhausted": 1} {
		if got := testutil.ToFloat64(ts.metrics.selects.WithLabelValues("chat", result)); got != want {
			t.Errorf("floodgate_select_total{route=chat,result=%s} = %v, want %v", result, got, want)
		}
	}
	if got := testutil.ToFloat64(ts.metrics.selects.WithLabelValues("", "never")); got != 1 {
		t.Errorf("inline never selections = %v, want 1", got)
	}
}

// TestRecordUsage: weighted usage goes into the token rules only, and a
// ticket settles the admission's deposit instead of charging it twice.
func TestRecordUsage(t *testing.T) {
	ts := newTestServer(t, gatewayConfig, nil, nil)
	sel := ts.selectOK(`{"route":"chat"}`)
	body := `{"limiter":"route-primary","attributes":{"route":"primary"},"usage":{"input":2,"output":3},"ticket":"` + sel.Decision.Ticket + `"}`
	d := ts.decide("/v1/record", body)
	if d.Rule != "tpm" || d.Remaining != 89 || len(d.Rules) != 1 {
		t.Errorf("settled usage: %+v, want tpm with 100-11 = 89 left", d)
	}
	if d := ts.decide("/v1/check", `{"limiter":"route-primary","attributes":{"route":"primary"},"cost":0}`); d.Rules[0].Remaining != 0 || d.Rules[1].Remaining != 89 {
		t.Errorf("after settling: %+v, want rpm 0 (one request) and tpm 89", d.Rules)
	}
	// Without a ticket the whole weighted cost is recorded; cached tokens
	// are free.
	d = ts.decide("/v1/record", `{"limiter":"route-primary","attributes":{"route":"primary"},"usage":{"input":10,"cached_input":500}}`)
	if d.Remaining != 79 {
		t.Errorf("unsettled usage: %+v, want 79 left", d)
	}
	// The existing shape still records cost into every rule.
	d = ts.decide("/v1/record", `{"limiter":"keys","attributes":{"api_key":"k"},"cost":4}`)
	if d.Remaining != 6 {
		t.Errorf("cost record: %+v", d)
	}
}

func TestGatewayErrors(t *testing.T) {
	ts := newTestServer(t, gatewayConfig, nil, nil)
	ticket := ts.decide("/v1/check", `{"limiter":"keys","attributes":{"api_key":"k"}}`).Ticket
	many := `{"candidates":[` + strings.Repeat(`{"limiter":"keys"},`, 64) + `{"limiter":"keys"}]}`
	for _, tt := range []struct {
		name, path, body string
		status           int
		kind, detail     string
	}{
		{"select neither", "/v1/select", `{}`, 400, kindInvalidRequest, "route or candidates: one must be set"},
		{"select both", "/v1/select", `{"route":"chat","candidates":[{"limiter":"keys"}]}`, 400, kindInvalidRequest, "route and candidates: set one, not both"},
		{"unknown route", "/v1/select", `{"route":"chta"}`, 404, kindUnknownRoute, `route: no route named "chta"; GET /v1/limiters lists them`},
		{"unknown candidate limiter", "/v1/select", `{"candidates":[{"limiter":"keys"},{"limiter":"nope"}]}`, 404, kindUnknownLimiter, `candidates[1].limiter: no limiter named "nope"; GET /v1/limiters lists them`},
		{"candidate without limiter", "/v1/select", `{"candidates":[{"name":"x"}]}`, 400, kindInvalidRequest, "candidates[0].limiter: must be set"},
		{"candidate cost", "/v1/select", `{"candidates":[{"limiter":"keys","cost":0}]}`, 400, kindInvalidRequest, "candidates[0].cost: must be at least 1, got 0"},
		{"too many candidates", "/v1/select", many, 400, kindInvalidRequest, "candidates: at most 64, got 65"},
		{"unknown exclude", "/v1/select", `{"route":"chat","exclude":["primary","backpu"]}`, 400, kindInvalidRequest, `exclude[1]: no candidate named "backpu" in this list`},
		{"select unknown field", "/v1/select", `{"route":"chat","cost":2}`, 400, kindInvalidRequest, `unknown field "cost"; see docs/http-api.md`},
		{"candidate unknown field", "/v1/select", `{"candidates":[{"limiter":"keys","attrs":{}}]}`, 400, kindInvalidRequest, `unknown field "candidates[0].attrs"; see docs/http-api.md`},
		{"cost and usage", "/v1/record", `{"limiter":"keys","cost":1,"usage":{"input":1}}`, 400, kindInvalidRequest, "cost and usage: set one, not both"},
		{"unknown class", "/v1/record", `{"limiter":"keys","usage":{"input":1,"audio":2}}`, 400, kindInvalidRequest, `usage: unknown token class "audio"`},
		{"negative count", "/v1/record", `{"limiter":"keys","usage":{"input":-1}}`, 400, kindInvalidRequest, `usage: token class "input": count -1 must not be negative`},
		{"forged ticket", "/v1/record", `{"limiter":"keys","cost":1,"ticket":"AAAA"}`, 400, kindInvalidTicket, "ticket: " + errBadTicket.Error()},
		{"foreign ticket", "/v1/record", `{"limiter":"route-primary","cost":1,"ticket":"` + ticket + `"}`, 400, kindInvalidTicket, `ticket: issued by limiter "keys", not "route-primary"`},
		{"record unknown limiter", "/v1/record", `{"limiter":"nope","usage":{"input":1}}`, 404, kindUnknownLimiter, `limiter: no limiter named "nope"; GET /v1/limiters lists them`},
		{"usage not counts", "/v1/record", `{"limiter":"keys","usage":{"input":"2"}}`, 400, kindInvalidRequest, `usage: must be a whole number, got a JSON string`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, h, b := ts.do("POST", tt.path, tt.body)
			var p problem
			json.Unmarshal(b, &p)
			if code != tt.status || h.Get("Content-Type") != "application/problem+json" ||
				p.Type != problemBase+tt.kind || p.Detail != tt.detail {
				t.Errorf("got %d %s %+v\nwant %d %s %q", code, h.Get("Content-Type"), p, tt.status, tt.kind, tt.detail)
			}
		})
	}
	// Usage without token_classes configured.
	plain := newTestServer(t, testConfig, nil, nil)
	code, _, b := plain.do("POST", "/v1/record", `{"limiter":"api","usage":{"input":1}}`)
	if code != 400 || !strings.Contains(string(b), "no token_classes are configured") {
		t.Errorf("usage without token classes: %d %s", code, b)
	}
}

// TestReloadCarriesGateway: routes, token classes and token rules follow
// a reload.
func TestReloadCarriesGateway(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floodgate.yaml")
	writeFile(t, path, gatewayConfig)
	ts := newTestServer(t, gatewayConfig, nil, func(s *Server) { s.ConfigPath = path })
	changed := strings.Replace(gatewayConfig, "name: chat", "name: chat2", 1)
	changed = strings.Replace(changed, "output: 3", "output: 5", 1)
	changed = strings.Replace(changed, "  - name: keys\n", "  - name: keys\n    token_rules: [rpm]\n", 1)
	writeFile(t, path, changed)
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := ts.do("POST", "/v1/select", `{"route":"chat"}`); code != 404 {
		t.Errorf("the old route still selects: %d", code)
	}
	if sel := ts.selectOK(`{"route":"chat2"}`); sel.Candidate != "primary" {
		t.Errorf("new route: %+v", sel)
	}
	if d := ts.decide("/v1/record", `{"limiter":"keys","attributes":{"api_key":"k"},"usage":{"output":1}}`); d.Remaining != 5 || len(d.Rules) != 1 {
		t.Errorf("weights after reload: %+v, want 10-5 = 5 left", d)
	}
	code, _, b := ts.do("GET", "/v1/limiters", "")
	if code != 200 || !strings.Contains(string(b), `"routes":[{"name":"chat2","candidates":[{"name":"primary","limiter":"route-primary","attributes":{"route":"primary"}}`) ||
		!strings.Contains(string(b), `"token_classes":{"cached_input":0,"input":1,"output":5}`) {
		t.Errorf("limiters: %d %s", code, b)
	}
}
