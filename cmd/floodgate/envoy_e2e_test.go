package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// envoyConfig is in the format of Envoy's reference rate limit service.
const envoyConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 25}
  - key: path
    value: /api/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: path
    value: /beta
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 1, name: per-user}
  - key: plan
    value: gold
    rate_limit:
      unit: hour
      requests_per_unit: 3
      replaces: [{name: per-user}]
`

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func startEnvoyService(t *testing.T, store string) (*service, rlsv3.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "envoy")
	os.Mkdir(dir, 0o755)
	write(t, filepath.Join(dir, "edge.yaml"), envoyConfig)
	s := startService(t, store+e2eConfig, nil, "--envoy-config-dir", dir)
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return s, rlsv3.NewRateLimitServiceClient(conn), conn
}

func TestEnvoyAPI(t *testing.T) { forEachStore(t, testEnvoyAPI) }

func testEnvoyAPI(t *testing.T, store string) {
	_, c, conn := startEnvoyService(t, store)
	ctx := context.Background()
	should := func(hits uint32, descs ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", h, err)
	}

	// Wildcards: each matching path has its own counter of 2.
	for i, want := range []rlsv3.RateLimitResponse_Code{ok, ok, over} {
		if got := should(1, desc("path", "/api/a")).OverallCode; got != want {
			t.Errorf("/api/a request %d: %v, want %v", i, got, want)
		}
	}
	if got := should(1, desc("path", "/api/b")); got.OverallCode != ok || got.Statuses[0].LimitRemaining != 1 {
		t.Errorf("/api/b: %v", got)
	}
	// hits_addend 0 checks without counting.
	for i := 0; i < 3; i++ {
		if got := should(0, withHits(desc("path", "/api/c"), 0)); got.OverallCode != ok || got.Statuses[0].LimitRemaining != 2 {
			t.Errorf("peek %d: %v", i, got)
		}
	}
	// Unlimited.
	if got := should(1, desc("path", "/health")); got.OverallCode != ok || got.Statuses[0].CurrentLimit != nil {
		t.Errorf("/health: %v", got)
	}
	// Shadow mode never says OVER_LIMIT.
	for i := 0; i < 3; i++ {
		if got := should(1, desc("path", "/beta")).OverallCode; got != ok {
			t.Errorf("shadow /beta request %d: %v", i, got)
		}
	}
	// Nested descriptors.
	if got := should(1, desc("tenant", "t1", "user", "u1")); got.OverallCode != ok || got.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Errorf("nested first: %v", got)
	}
	if got := should(1, desc("tenant", "t1", "user", "u1")).OverallCode; got != over {
		t.Errorf("nested second: %v", got)
	}
	// replaces: the gold plan's limit replaces per-user's.
	got := should(1, desc("tenant", "t2", "user", "u2"), desc("plan", "gold"))
	if got.OverallCode != ok || got.Statuses[0].CurrentLimit != nil || got.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Errorf("replaces: %v", got)
	}
	// Over the limit on one descriptor charges none of the others.
	resp := should(1, desc("path", "/api/a"), desc("remote_address", "10.1.1.1"))
	if resp.OverallCode != over {
		t.Errorf("mixed: %v", resp)
	}
	if got := should(1, withHits(desc("remote_address", "10.1.1.1"), 0)); got.Statuses[0].LimitRemaining != 25 {
		t.Errorf("remote address charged by an over-limit request: %v", got)
	}
}

func withHits(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// TestEnvoyConcurrentAdmission: concurrent gRPC clients get exactly the
// limit.
func TestEnvoyConcurrentAdmission(t *testing.T) { forEachStore(t, testEnvoyConcurrentAdmission) }

func testEnvoyConcurrentAdmission(t *testing.T, store string) {
	_, c, _ := startEnvoyService(t, store)
	var okCount atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
					Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("remote_address", "10.2.2.2")}})
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == ok {
					okCount.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := okCount.Load(); got != 25 {
		t.Errorf("admitted %d of 80, want exactly 25", got)
	}
}

func TestValidateEnvoyDir(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "edge.yaml"), envoyConfig)
	out, err := exec.Command(binary, "validate", "--envoy-config-dir", dir).CombinedOutput()
	if exitCode(err) != 0 || string(out) != dir+": ok (1 domains)\n" {
		t.Errorf("validate a good envoy dir: %v\n%s", err, out)
	}
	write(t, filepath.Join(dir, "bad.yaml"), "domain: bad\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	out, err = exec.Command(binary, "validate", "--envoy-config-dir", dir).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), filepath.Join(dir, "bad.yaml")+":4:") {
		t.Errorf("validate a bad envoy dir: %v\n%s", err, out)
	}
}

// TestCheckEnvoyDomain: floodgate check decides on an Envoy domain's
// limiter, its attributes being a descriptor's entries, and counts with
// Envoy's calls.
func TestCheckEnvoyDomain(t *testing.T) {
	s, c, _ := startEnvoyService(t, "")
	check := func(args ...string) (string, int) {
		out, err := exec.Command(binary, append([]string{"check", "--addr", s.http, "--limiter", "envoy.edge"}, args...)...).CombinedOutput()
		return string(out), exitCode(err)
	}
	if out, code := check("--attr", "user=ann", "--attr", "tenant=acme"); code != 0 || !strings.HasPrefix(out, "ALLOWED  limiter envoy.edge\n") || !strings.Contains(out, "tenant.user") {
		t.Errorf("first check: exit %d\n%s", code, out)
	}
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("tenant", "acme", "user", "ann")}})
	if err != nil || resp.OverallCode != over {
		t.Errorf("gRPC after the check: %v %v, want OVER_LIMIT", resp, err)
	}
	if out, code := check("--attr", "path=/api/v1"); code != 0 || !strings.Contains(out, "path_/api/*") {
		t.Errorf("check of a wildcard path: exit %d\n%s", code, out)
	}
}
