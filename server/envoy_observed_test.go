package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/store/memory"
)

// edgeDomain has a counted limit per address and a block list (0 requests
// per unit) of one address.
const edgeDomain = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// openEnvoyOnly serves the Envoy domain files of dir with a configuration
// that names only the store, as the reference mode does.
func openEnvoyOnly(t *testing.T, dir string) *testServer {
	t.Helper()
	return openEnvoyOnlyLogging(t, dir, io.Discard)
}

// openEnvoyOnlyLogging is openEnvoyOnly logging to w.
func openEnvoyOnlyLogging(t *testing.T, dir string, w io.Writer) *testServer {
	t.Helper()
	c, err := config.ParseWith("store.yaml", []byte("store:\n  memory: {max_keys: 1000}\n"), config.Options{EnvoyDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	m := memory.New(nil)
	t.Cleanup(func() { m.Close() })
	reg := prometheus.NewRegistry()
	s := &Server{
		Config: c, Store: m, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", EnvoyConfigDir: dir,
		AdminToken: "s3cret", Registerer: reg, Gatherer: reg,
		Logger: slog.New(slog.NewTextHandler(w, nil)),
	}
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &testServer{Server: s, t: t, url: "http://" + s.HTTPAddress(), clock: clocktest.New(start), reg: reg}
}

// Envoy domains are seen where the configuration's limiters are: in
// GET /v1/top, on the status page's data and in floodgate_breaker_state;
// refusals by requests_per_unit: 0 are counted like any denial.
func TestEnvoyDomainsObserved(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), edgeDomain)
	ts := openEnvoyOnly(t, dir)
	c := rlsv3.NewRateLimitServiceClient(dial(t, ts.GRPCAddress()))
	for range 3 {
		ask(t, c, "edge", "remote_address", "10.0.0.1")
	}
	for range 4 {
		if resp := ask(t, c, "edge", "blocked", "10.6.6.6"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("blocked address: %v", resp)
		}
	}
	auth := []string{"Authorization", "Bearer s3cret"}

	for _, tt := range []struct {
		rule, result string
		want         float64
	}{
		{"remote_address", resultAllowed, 2},
		{"remote_address", resultDenied, 1},
		{"blocked", resultDenied, 4},
	} {
		if got := testutil.ToFloat64(ts.metrics.decisions.WithLabelValues("envoy.edge", tt.rule, tt.result)); got != tt.want {
			t.Errorf("decisions{envoy.edge,%s,%s} = %v, want %v", tt.rule, tt.result, got, tt.want)
		}
	}
	want := `
# HELP floodgate_breaker_state State of each limiter's store circuit breaker: 0 closed, 1 open, 2 half open.
# TYPE floodgate_breaker_state gauge
floodgate_breaker_state{limiter="envoy.edge"} 0
`
	if err := testutil.GatherAndCompare(ts.reg, strings.NewReader(want), "floodgate_breaker_state"); err != nil {
		t.Error(err)
	}

	code, _, b := ts.do("GET", "/v1/top?limiter=envoy.edge", "", auth...)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/top?limiter=envoy.edge: %d %s", code, b)
	}
	var top topResponse
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	denied := map[string]string{}
	for _, r := range top.Rules {
		for _, k := range r.Keys {
			denied[r.Rule] = k.Key
		}
	}
	if denied["remote_address"] != "remote_address=10.0.0.1" || denied["blocked"] != "blocked=10.6.6.6" {
		t.Errorf("top denied keys by rule %v: %s", denied, b)
	}

	code, _, b = ts.do("GET", "/status/data", "", auth...)
	var d statusData
	if err := json.Unmarshal(b, &d); code != http.StatusOK || err != nil {
		t.Fatalf("GET /status/data: %d %v %s", code, err, b)
	}
	if len(d.Limiters) != 1 || d.Limiters[0].Name != "envoy.edge" || d.Limiters[0].EnvoyDomain != "edge" || len(d.Limiters[0].Rules) != 2 ||
		d.Config.EnvoyDomains == nil || *d.Config.EnvoyDomains != 1 {
		t.Errorf("status data of an Envoy-only service: %s", b)
	}
}

// With nothing configured (a store and an empty Envoy directory), the
// status page's data holds an empty list, not null.
func TestStatusDataNothingConfigured(t *testing.T) {
	ts := openEnvoyOnly(t, t.TempDir())
	code, _, b := ts.do("GET", "/status/data", "", "Authorization", "Bearer s3cret")
	if code != http.StatusOK || !strings.Contains(string(b), `"limiters":[]`) || !strings.Contains(string(b), `"envoy_domains":0`) {
		t.Errorf("GET /status/data with nothing configured: %d %s", code, b)
	}
}

// Reloading the Envoy directory of a service without a configuration
// file logs the domains, not an empty "config reloaded file=\"\" limiters=0".
func TestEnvoyReloadLog(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), edgeDomain)
	var logs syncbuf.Buffer
	ts := openEnvoyOnlyLogging(t, dir, &logs)
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); strings.Contains(got, "config reloaded") || !strings.Contains(got, `msg="envoy rate limit configuration reloaded"`) {
		t.Errorf("reload log:\n%s", got)
	}
}
