package server

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// apiDomain has a per-address limit, a path limit whose descriptor path
// holds characters names may not, and a per-user limit nested in tenants.
const apiDomain = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /v1/*
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1}
`

// An Envoy domain is the limiter envoy.<domain> across the API: GET
// /v1/limiters lists it, POST /v1/check decides on it with its attributes
// as a descriptor's entries (counting with Envoy's calls), its tickets
// refund, and the endpoints that take only the configuration's limiters
// say so.
func TestEnvoyDomainAcrossTheAPI(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), apiDomain)
	ts := openEnvoyOnly(t, dir)
	c := rlsv3.NewRateLimitServiceClient(dial(t, ts.GRPCAddress()))

	code, _, b := ts.do("GET", "/v1/limiters", "")
	var lims struct {
		Limiters []limiterInfo `json:"limiters"`
	}
	if err := json.Unmarshal(b, &lims); code != http.StatusOK || err != nil || len(lims.Limiters) != 1 {
		t.Fatalf("GET /v1/limiters: %d %v %s", code, err, b)
	}
	l := lims.Limiters[0]
	if l.Name != "envoy.edge" || l.EnvoyDomain != "edge" || len(l.Rules) != 3 {
		t.Fatalf("GET /v1/limiters: %s, want envoy.edge, marked as the domain edge, with 3 rules", b)
	}
	keys := map[string]string{}
	for _, r := range l.Rules {
		keys[r.Name] = strings.Join(r.Key, ",")
	}
	if keys["remote_address"] != "remote_address" || keys["path_/v1/*"] != "path" || keys["tenant.user"] != "tenant,user" {
		t.Errorf("rules and their keys %v, want remote_address, path_/v1/* and tenant.user keyed on their entries", keys)
	}

	// /v1/check and Envoy's API count together.
	check := func(body string) DecisionResponse {
		t.Helper()
		code, _, b := ts.do("POST", "/v1/check", body)
		var d DecisionResponse
		if err := json.Unmarshal(b, &d); code != http.StatusOK || err != nil {
			t.Fatalf("POST /v1/check %s: %d %v %s", body, code, err, b)
		}
		return d
	}
	addr := `{"limiter":"envoy.edge","attributes":{"remote_address":"10.0.0.1"}}`
	d := check(addr)
	if !d.Allowed || d.Rule != "remote_address" || d.Limit != 2 || d.Remaining != 1 || d.Ticket == "" || len(d.Rules) != 1 {
		t.Errorf("first check: %+v, want admitted by remote_address, 1 of 2 left, with a ticket", d)
	}
	if code, _, b := ts.do("POST", "/v1/refund", `{"ticket":"`+d.Ticket+`"}`); code != http.StatusNoContent {
		t.Errorf("refund: %d %s", code, b)
	}
	ask(t, c, "edge", "remote_address", "10.0.0.1")
	if d := check(addr); !d.Allowed || d.Remaining != 0 {
		t.Errorf("after a refund and one gRPC call: %+v, want admitted with nothing left", d)
	}
	if resp := ask(t, c, "edge", "remote_address", "10.0.0.1"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("gRPC after two checks: %v, want OVER_LIMIT", resp)
	}
	if d := check(addr); d.Allowed || d.Reason != "limit" || d.RetryAfterMS <= 0 {
		t.Errorf("over the limit: %+v, want denied with a retry-after", d)
	}

	// Attributes in any order; rules shown as written.
	if d := check(`{"limiter":"envoy.edge","attributes":{"user":"ann","tenant":"acme"}}`); !d.Allowed || d.Rule != "tenant.user" {
		t.Errorf("user and tenant: %+v, want admitted by tenant.user", d)
	}
	if d := check(`{"limiter":"envoy.edge","attributes":{"path":"/v1/users"},"cost":0}`); !d.Allowed || d.Rule != "path_/v1/*" || d.Rules[0].Name != "path_/v1/*" || d.Remaining != 5 {
		t.Errorf("a check of path /v1/users: %+v, want admitted by path_/v1/* with 5 left", d)
	}
	if d := check(`{"limiter":"envoy.edge","attributes":{"path":"/elsewhere"}}`); !d.Allowed || d.Rule != "" {
		t.Errorf("no limit matches: %+v, want admitted by no rule", d)
	}

	for _, tc := range []struct{ path, body, detail string }{
		{"/v1/reset", `{"limiter":"envoy.edge","attributes":{"remote_address":"10.0.0.1"}}`,
			`limiter: "envoy.edge" is the limiter of the Envoy domain "edge", which /v1/reset does not take: ask POST /v1/check, or Envoy's API`},
		{"/v1/record", `{"limiter":"envoy.edge","cost":3}`,
			`limiter: "envoy.edge" is the limiter of the Envoy domain "edge", which /v1/record does not take: ask POST /v1/check, or Envoy's API`},
		{"/v1/select", `{"candidates":[{"limiter":"envoy.edge"}]}`,
			`candidates[0].limiter: "envoy.edge" is the limiter of the Envoy domain "edge", which /v1/select does not take: ask POST /v1/check, or Envoy's API`},
	} {
		code, _, b := ts.do("POST", tc.path, tc.body, "Authorization", "Bearer s3cret")
		var p problem
		if err := json.Unmarshal(b, &p); code != http.StatusBadRequest || err != nil || p.Type != problemBase+kindInvalidRequest || p.Detail != tc.detail {
			t.Errorf("POST %s on envoy.edge: %d %s, want 400 saying %q", tc.path, code, b, tc.detail)
		}
	}
}
