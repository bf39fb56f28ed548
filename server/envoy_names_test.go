package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// An Envoy limit's rule is shown as its descriptor path is written
// (path_/v1/*), not as the escaped name its store keys are made of, in the
// metrics, on the status page and in GET /v1/top, which takes it back too.
func TestEnvoyRuleNamesAsWritten(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), `domain: edge
descriptors:
  - key: path
    value: /v1/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`)
	ts := openEnvoyOnly(t, dir)
	c := rlsv3.NewRateLimitServiceClient(dial(t, ts.GRPCAddress()))
	ask(t, c, "edge", "path", "/v1/users")
	if resp := ask(t, c, "edge", "path", "/v1/users"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("second request: %v", resp)
	}
	ask(t, c, "edge", "path", "/blocked")
	auth := []string{"Authorization", "Bearer s3cret"}

	want := `
# HELP floodgate_decisions_total Decisions (checks and peeks) by limiter, binding rule and result: allowed, denied, shadow_denied, fail_open or fail_closed.
# TYPE floodgate_decisions_total counter
floodgate_decisions_total{limiter="envoy.edge",result="allowed",rule="path_/v1/*"} 1
floodgate_decisions_total{limiter="envoy.edge",result="denied",rule="path_/blocked"} 1
floodgate_decisions_total{limiter="envoy.edge",result="denied",rule="path_/v1/*"} 1
`
	if err := testutil.GatherAndCompare(ts.reg, strings.NewReader(want), "floodgate_decisions_total"); err != nil {
		t.Error(err)
	}

	code, _, b := ts.do("GET", "/status/data", "", auth...)
	var d statusData
	if err := json.Unmarshal(b, &d); code != http.StatusOK || err != nil || len(d.Limiters) != 1 {
		t.Fatalf("GET /status/data: %d %v %s", code, err, b)
	}
	var rules []string
	for _, r := range d.Limiters[0].Rules {
		rules = append(rules, r.Rule)
		if r.Rule == "path_/v1/*" && (len(r.Keys) != 1 || r.Keys[0].Key != `path=/v1/users`) {
			t.Errorf("status page, rule %s: keys %+v, want path=/v1/users", r.Rule, r.Keys)
		}
	}
	if want := []string{"path_/v1/*", "path_/blocked"}; !slices.Equal(rules, want) {
		t.Errorf("status page rules %q, want %q", rules, want)
	}

	for _, rule := range []string{"path_/v1/*", "path_-2fv1-2f-2a"} {
		code, _, b := ts.do("GET", "/v1/top?limiter=envoy.edge&rule="+url.QueryEscape(rule), "", auth...)
		var top topResponse
		if err := json.Unmarshal(b, &top); code != http.StatusOK || err != nil || len(top.Rules) != 1 || top.Rules[0].Rule != "path_/v1/*" {
			t.Errorf("GET /v1/top?rule=%s: %d %v %s, want the rule path_/v1/*", rule, code, err, b)
		}
	}
}
