package server

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func envoyFile(limit int) string {
	return "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: " +
		strconv.Itoa(limit) + "}\n"
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, kv ...string) *rlsv3.RateLimitResponse {
	t.Helper()
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestEnvoyService serves an Envoy config directory over gRPC next to the
// YAML limiters, reloads it, and rejects a broken change.
func TestEnvoyService(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "edge.yaml")
	writeFile(t, file, envoyFile(2))
	ts := newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.EnvoyConfigDir = dir
		s.WatchConfig = true
	})
	conn := dial(t, ts.GRPCAddress())
	c := rlsv3.NewRateLimitServiceClient(conn)

	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}

	codes := func(n int, kv ...string) []rlsv3.RateLimitResponse_Code {
		var out []rlsv3.RateLimitResponse_Code
		for i := 0; i < n; i++ {
			out = append(out, ask(t, c, "edge", kv...).OverallCode)
		}
		return out
	}
	got := codes(3, "remote_address", "10.0.0.1")
	if got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OK || got[2] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("edge with limit 2: %v", got)
	}
	// A domain no file defines falls back to the YAML limiter of that name.
	resp := ask(t, c, "leases", "user", "u1")
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Errorf("leases via Envoy: %v", resp)
	}
	if resp := ask(t, c, "leases", "user", "u1"); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("second lease via Envoy: %v", resp)
	}
	if got := testutil.ToFloat64(ts.metrics.decisions.WithLabelValues("leases", "per-user", resultDenied)); got != 1 {
		t.Errorf("envoy decisions are not counted: %v", got)
	}
	// Every gRPC call is counted by method and code, and timed.
	const rls = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	if _, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{}); err == nil {
		t.Error("a request without a domain was answered")
	}
	for _, tt := range []struct {
		method, code string
		want         float64
	}{
		{rls, "OK", 5},
		{rls, "InvalidArgument", 1},
		{rls, "Unavailable", 0},
		{"/grpc.health.v1.Health/Check", "OK", 1},
	} {
		if got := testutil.ToFloat64(ts.metrics.grpcRequests.WithLabelValues(tt.method, tt.code)); got != tt.want {
			t.Errorf("grpc_requests_total{%s,%s} = %v, want %v", tt.method, tt.code, got, tt.want)
		}
	}
	_, _, body := ts.do("GET", "/metrics", "")
	if want := `floodgate_grpc_request_duration_seconds_count{method="` + rls + `"} 6`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}

	// The watcher applies a change to the directory...
	writeFile(t, file, envoyFile(5))
	eventually(t, "the Envoy limit to become 5", func() bool {
		return ask(t, c, "edge", "remote_address", "10.9.9.9").Statuses[0].CurrentLimit.GetRequestsPerUnit() == 5
	})
	// ...and rejects a broken one, which keeps the old limits serving.
	writeFile(t, file, "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	eventually(t, "the broken Envoy file to be rejected", func() bool {
		return testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("failure")) == 1
	})
	if got := ask(t, c, "edge", "remote_address", "10.8.8.8").Statuses[0].CurrentLimit.GetRequestsPerUnit(); got != 5 {
		t.Errorf("limit after a broken Envoy file = %d, want 5", got)
	}
	os.Remove(file)
}
