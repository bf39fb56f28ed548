package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

const gatewayE2EConfig = `
token_classes: {input: 1, output: 3}
limiters:
  - name: keys
    token_rules: [tpm]
    rules:
      - {name: rpm, key: [api_key], algorithm: sliding_window, limit: 100, window: 1m}
      - {name: tpm, key: [api_key], algorithm: sliding_window, limit: 20, window: 1m}
  - name: route-primary
    token_rules: [tpm]
    rules:
      - {name: rpm, key: [route], algorithm: sliding_window, limit: 2, window: 1m}
      - {name: tpm, key: [route], algorithm: sliding_window, limit: 1000, window: 1m}
  - name: route-backup
    token_rules: [tpm]
    rules:
      - {name: rpm, key: [route], algorithm: sliding_window, limit: 1, window: 1h}
      - {name: tpm, key: [route], algorithm: sliding_window, limit: 1000, window: 1h}
  - name: budget
    failure_policy: closed
    rules:
      - {name: monthly, key: [tenant], algorithm: fixed_window, align: month, time_zone: America/New_York, limit: 1000}
routes:
  - name: chat
    candidates:
      - {name: primary, limiter: route-primary, attributes: {route: primary}}
      - {name: backup, limiter: route-backup, attributes: {route: backup}}
`

// selection is POST /v1/select's answer.
type selection struct {
	Allowed      bool      `json:"allowed"`
	Candidate    string    `json:"candidate"`
	Index        int       `json:"index"`
	Decision     *decision `json:"decision"`
	RetryAfterMS int64     `json:"retry_after_ms"`
	Never        bool      `json:"never"`
	Capped       int       `json:"capped"`
	Skipped      []struct {
		Name         string   `json:"name"`
		Index        int      `json:"index"`
		Limiter      string   `json:"limiter"`
		Reason       string   `json:"reason"`
		Caps         []string `json:"caps"`
		RetryAfterMS int64    `json:"retry_after_ms"`
		Never        bool     `json:"never"`
	} `json:"skipped"`
}

func (s *service) choose(body string) selection {
	s.t.Helper()
	code, b := s.call("POST", "/v1/select", body)
	if code != 200 {
		s.t.Fatalf("POST /v1/select %s: %d %s", body, code, b)
	}
	var sel selection
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sel); err != nil {
		s.t.Fatalf("selection %s: %v", b, err)
	}
	return sel
}

// remaining peeks at each rule of a limiter for attrs (a JSON object) and
// returns what each has left, by rule name.
func (s *service) remaining(limiter, attrs string) map[string]int64 {
	s.t.Helper()
	d := s.decide("/v1/check", `{"limiter":"`+limiter+`","attributes":`+attrs+`,"cost":0}`)
	out := make(map[string]int64, len(d.Rules))
	for _, r := range d.Rules {
		out[r.Name] = r.Remaining
	}
	return out
}

// TestGateway walks an LLM gateway's request flow through the service:
// budget check, key admission, route selection with failover, weighted
// settlement, a cached answer and the budget record.
func TestGateway(t *testing.T) { forEachStore(t, testGateway) }

func testGateway(t *testing.T, store string) {
	// The Redis store's over-limit cache answers a limiter with a rule
	// cached as denied locally, reporting its other rules at their full
	// limit unread (docs/gateway.md); the counters this test reads need
	// every rule read, so the cache is off.
	store = strings.Replace(store, "}\n", ", deny_cache_size: -1}\n", 1)
	s := startService(t, store+gatewayE2EConfig, nil)
	const (
		key1    = `{"api_key":"k1"}`
		key2    = `{"api_key":"k2"}`
		primary = `{"route":"primary"}`
		backup  = `{"route":"backup"}`
		usage   = `"usage":{"input":2,"output":3}` // 2×1 + 3×3 = 11
	)

	// The budget check never counts, however often it is made.
	for range 3 {
		if d := s.decide("/v1/check", `{"limiter":"budget","attributes":{"tenant":"t1"},"cost":0}`); !d.Allowed || d.Remaining != 1000 {
			t.Fatalf("budget peek: %+v", d)
		}
	}
	if d := s.decide("/v1/check", `{"limiter":"budget","attributes":{"tenant":"t1"},"cost":600,"peek":true}`); !d.Allowed || d.Remaining != 1000 {
		t.Fatalf("budget peek at 600: %+v", d)
	}
	if d := s.decide("/v1/check", `{"limiter":"budget","attributes":{"tenant":"t1"},"cost":1001,"peek":true}`); d.Allowed {
		t.Fatalf("budget peek past the budget admitted: %+v", d)
	}

	// Two requests: key admitted, primary selected, 11 tokens settled into
	// the key's and the route's tpm with their tickets.
	for i := range 2 {
		kd := s.decide("/v1/check", `{"limiter":"keys","attributes":`+key1+`}`)
		if !kd.Allowed {
			t.Fatalf("request %d: key denied: %+v", i, kd)
		}
		sel := s.choose(`{"route":"chat","attributes":` + key1 + `}`)
		if !sel.Allowed || sel.Candidate != "primary" || sel.Index != 0 || sel.Decision.Ticket == "" || len(sel.Skipped) != 0 {
			t.Fatalf("request %d: %+v", i, sel)
		}
		rd := s.decide("/v1/record", `{"limiter":"route-primary","attributes":`+primary+`,`+usage+`,"ticket":"`+sel.Decision.Ticket+`"}`)
		if rd.Rule != "tpm" || rd.Remaining != 1000-11*int64(i+1) {
			t.Errorf("request %d: route settle: %+v", i, rd)
		}
		kr := s.decide("/v1/record", `{"limiter":"keys","attributes":`+key1+`,`+usage+`,"ticket":"`+kd.Ticket+`"}`)
		if kr.Rule != "tpm" || kr.Remaining != max(0, 20-11*int64(i+1)) {
			t.Errorf("request %d: key settle: %+v", i, kr)
		}
	}
	if got := s.remaining("keys", key1); got["tpm"] != 0 || got["rpm"] != 98 {
		t.Errorf("key after 22 tokens: %v, want tpm 0 (over), rpm 98 (tokens never reach rpm)", got)
	}
	// Over its tokens per minute: the key's next request is refused.
	if d := s.decide("/v1/check", `{"limiter":"keys","attributes":`+key1+`}`); d.Allowed || d.Rule != "tpm" || d.RetryAfterMS <= 0 || d.RetryAfterMS > 60000 {
		t.Errorf("key over its tpm: %+v", d)
	}

	// primary is at its rpm cap: skipped, and backup serves. The refused
	// candidate's counters do not move.
	before := s.remaining("route-primary", primary)
	if before["rpm"] != 0 || before["tpm"] != 978 {
		t.Fatalf("primary before: %v", before)
	}
	sel := s.choose(`{"route":"chat","attributes":` + key2 + `}`)
	if !sel.Allowed || sel.Candidate != "backup" || sel.Index != 1 || sel.RetryAfterMS != 0 || sel.Capped != 1 ||
		len(sel.Skipped) != 1 || sel.Skipped[0].Name != "primary" || strings.Join(sel.Skipped[0].Caps, ",") != "rpm" ||
		sel.Skipped[0].RetryAfterMS <= 0 || sel.Skipped[0].RetryAfterMS > 60000 {
		t.Fatalf("failover to backup: %+v", sel)
	}
	if after := s.remaining("route-primary", primary); after["rpm"] != before["rpm"] || after["tpm"] != before["tpm"] {
		t.Errorf("the refused candidate's counters moved: %v, then %v", before, after)
	}
	// Both capped: denied with the earliest retry-after (primary's minute,
	// not backup's hour).
	none := s.choose(`{"route":"chat"}`)
	if none.Allowed || none.Candidate != "" || none.Index != -1 || none.Decision != nil || none.Capped != 2 || len(none.Skipped) != 2 {
		t.Fatalf("all capped: %+v", none)
	}
	if p, b := none.Skipped[0].RetryAfterMS, none.Skipped[1].RetryAfterMS; none.RetryAfterMS != p || p <= 0 || p > 60000 || b <= 60000 {
		t.Errorf("all capped: retry_after_ms %d, primary %d, backup %d; want primary's, the earliest", none.RetryAfterMS, p, b)
	}
	if got := s.remaining("route-backup", backup); got["rpm"] != 0 || got["tpm"] != 999 {
		t.Errorf("backup after one admission and a refusal: %v, want rpm 0, tpm 999", got)
	}

	// A cached answer: the key is admitted and settles its tokens; no
	// route is selected, so no route's counter moves.
	kd := s.decide("/v1/check", `{"limiter":"keys","attributes":`+key2+`}`)
	if d := s.decide("/v1/record", `{"limiter":"keys","attributes":`+key2+`,`+usage+`,"ticket":"`+kd.Ticket+`"}`); d.Remaining != 9 {
		t.Errorf("cached answer: key tpm %+v, want 20-11 = 9 left", d)
	}
	if got := s.remaining("route-primary", primary); got["tpm"] != 978 {
		t.Errorf("a cached answer moved primary's tpm: %v", got)
	}
	if got := s.remaining("route-backup", backup); got["tpm"] != 999 {
		t.Errorf("a cached answer moved backup's tpm: %v", got)
	}

	// The budget is recorded after the work (cost units), then checked.
	if d := s.decide("/v1/record", `{"limiter":"budget","attributes":{"tenant":"t1"},"cost":33}`); d.Remaining != 967 {
		t.Errorf("budget record: %+v", d)
	}
	for range 2 {
		if got := s.remaining("budget", `{"tenant":"t1"}`); got["monthly"] != 967 {
			t.Errorf("budget after the record: %v, want 967", got)
		}
	}

	_, m := s.call("GET", "/metrics", "")
	for _, want := range []string{
		`floodgate_select_total{result="admitted",route="chat"} 3`,
		`floodgate_select_total{result="capped",route="chat"} 1`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(m), "k1") || strings.Contains(string(m), "t1") {
		t.Errorf("/metrics has a key or tenant in a label")
	}
}
