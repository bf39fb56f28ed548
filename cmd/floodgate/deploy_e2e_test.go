package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate/internal/testcert"
)

// floodgate serve configured by its own file: Envoy domains over xDS
// (TLS to the control plane), its gRPC listener over mutual TLS, and
// traces over OTLP/gRPC, joined to the caller's trace on the HTTP API.
func TestServeDeploySections(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "ca")
	svcCrt, svcKey := ca.Issue(t, dir, "floodgate")
	cpCrt, cpKey := ca.Issue(t, dir, "control-plane")
	proxyCrt, proxyKey := ca.Issue(t, dir, "envoy")
	pair := func(c, k string) []tls.Certificate {
		p, err := tls.LoadX509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{p}
	}
	cp := startControlPlane(t, "127.0.0.1:0", &tls.Config{Certificates: pair(cpCrt, cpKey), MinVersion: tls.VersionTLS12})
	otlp := startOTLPReceiver(t, true)
	s := startService(t, `
store:
  memory: {max_keys: 10000}
limiters:
  - name: api
    rules: [{name: per-user, key: [user], algorithm: fixed_window, limit: 2, window: 1m}]
envoy:
  xds:
    server: `+cp.addr+`
    node_id: `+egNode+`
    tls: {ca_file: `+ca.File+`, server_name: control-plane}
grpc:
  tls: {cert_file: `+svcCrt+`, key_file: `+svcKey+`, client_ca_file: `+ca.File+`}
tracing:
  protocol: grpc
  service_name: edge-limits
`, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=50"})

	// Not ready until the first push (no start_without_config).
	resp, err := http.Get(s.http + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("/readyz before the first push: %d, want 503", resp.StatusCode)
	}
	plain, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := healthpb.NewHealthClient(plain).Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("the gRPC listener answered in plain text")
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: ca.Pool, ServerName: "floodgate", Certificates: pair(proxyCrt, proxyKey)})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlsv3.NewRateLimitServiceClient(conn)

	cp.set("1", egDomain("default/eg/http", 2))
	waitFor(t, "the first push", func() bool {
		r, err := rl.ShouldRateLimit(context.Background(), egRequest("default/eg/http", "probe", 0))
		return err == nil && r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 2
	})
	waitFor(t, "readiness", func() bool {
		resp, err := http.Get(s.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	code, body := s.call("POST", "/v1/check", `{"limiter":"api","attributes":{"user":"u1"}}`, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if code != 200 {
		t.Fatalf("check: %d %s", code, body)
	}
	waitFor(t, "the check's span", func() bool {
		return len(otlp.find(func(sp receivedSpan) bool { return sp.traceID == traceID && sp.parentID == parentID })) > 0
	})
	sp := otlp.find(func(sp receivedSpan) bool { return sp.traceID == traceID && sp.parentID == parentID })[0]
	if sp.service != "edge-limits" || sp.name != "POST /v1/check" || sp.attributes["floodgate.limiter"] != "api" || !strings.Contains(sp.attributes["floodgate.allowed"], "true") {
		t.Errorf("the check's span: %+v", sp)
	}
	waitFor(t, "the Envoy decisions' spans", func() bool {
		return len(otlp.find(func(sp receivedSpan) bool { return sp.attributes["floodgate.envoy.domain"] == "default/eg/http" })) > 0
	})
}
