package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-go/floodgate/envoy"
)

func envoyServer(t *testing.T, dir string, settings EnvoySettings) *testServer {
	t.Helper()
	return newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.EnvoyConfigDir = dir
		s.Envoy = settings
	})
}

// The reference service's endpoints: /healthcheck, POST /json, the
// "ratelimit" gRPC health service and the debug port's /rlconfig.
func TestReferenceEndpoints(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), envoyFile(2))
	ts := envoyServer(t, dir, EnvoySettings{Headers: &envoy.DefaultHeaders})

	if code, _, body := ts.do("GET", "/healthcheck", ""); code != 200 || string(body) != "OK" {
		t.Errorf("GET /healthcheck: %d %q", code, body)
	}
	h, err := healthpb.NewHealthClient(dial(t, ts.GRPCAddress())).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of \"ratelimit\": %v %v", h, err)
	}

	req := `{"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "10.0.0.1"}]}]}`
	for i, wantCode := range []int{200, 200, 429} {
		code, hdr, body := ts.do("POST", "/json", req)
		var resp rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(body, &resp); err != nil {
			t.Fatalf("request %d: %d %s: %v", i, code, body, err)
		}
		if code != wantCode || hdr.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: status %d (%s), want %d", i, code, hdr.Get("Content-Type"), wantCode)
		}
		s := resp.Statuses[0]
		if s.CurrentLimit.GetRequestsPerUnit() != 2 || s.LimitRemaining != uint32(max(0, 1-i)) || s.DurationUntilReset.GetSeconds() == 0 {
			t.Errorf("request %d: %s", i, body)
		}
		if len(resp.ResponseHeadersToAdd) != 3 {
			t.Errorf("request %d: response_headers_to_add = %v", i, resp.ResponseHeadersToAdd)
		}
	}
	// The reference's JSON field names.
	if _, _, body := ts.do("POST", "/json", req); !strings.Contains(string(body), `"overallCode":"OVER_LIMIT"`) ||
		!strings.Contains(string(body), `"requestsPerUnit":2`) {
		t.Errorf("JSON names: %s", body)
	}
	for _, bad := range []string{`{"domain": ""}`, `{"domain": "edge"}`, `not json`, `{"domain": "edge", "nope": 1}`} {
		if code, hdr, body := ts.do("POST", "/json", bad); code != 400 || hdr.Get("Content-Type") != "application/problem+json" {
			t.Errorf("POST /json %s: %d %s", bad, code, body)
		}
	}
	if code, _, _ := ts.do("GET", "/json", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /json: %d", code)
	}

	debug := httptest.NewServer(ts.DebugHandler())
	defer debug.Close()
	resp, err := http.Get(debug.URL + "/rlconfig")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "edge.remote_address: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false\n"; string(b) != want {
		t.Errorf("/rlconfig = %q, want %q", b, want)
	}
}

// With RequireDomains, /healthcheck fails until a domain is loaded, and
// passes once one is.
func TestHealthcheckRequiresDomains(t *testing.T) {
	dir := t.TempDir()
	ts := envoyServer(t, dir, EnvoySettings{RequireDomains: true})
	if code, _, body := ts.do("GET", "/healthcheck", ""); code != 500 || len(body) != 0 {
		t.Errorf("no domains: %d %q", code, body)
	}
	writeFile(t, filepath.Join(dir, "edge.yaml"), envoyFile(2))
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := ts.do("GET", "/healthcheck", ""); code != 200 {
		t.Errorf("after loading a domain: %d", code)
	}
	// Without Envoy domains at all, /json says so.
	plain := newTestServer(t, testConfig, nil, nil)
	if code, _, _ := plain.do("POST", "/json", `{"domain": "edge"}`); code != 404 {
		t.Errorf("POST /json without Envoy domains: %d", code)
	}
}
