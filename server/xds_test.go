package server

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// xdsServer is go-control-plane's snapshot cache and server, in plain
// text on loopback, counting the requests that carry an error (NACKs).
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache

	mu    sync.Mutex
	nacks []string
}

func startXDSServer(t *testing.T) *xdsServer {
	t.Helper()
	x := &xdsServer{cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	x.addr = ln.Addr().String()
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if d := req.GetErrorDetail(); d != nil {
			x.mu.Lock()
			x.nacks = append(x.nacks, d.GetMessage())
			x.mu.Unlock()
		}
		return nil
	}}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, serverv3.NewServer(context.Background(), x.cache, cb))
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return x
}

func (x *xdsServer) set(t *testing.T, node, version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := x.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (x *xdsServer) nackCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.nacks)
}

func edgeResource(limit uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: limit}}}}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Without StartWithoutConfig the service is not ready until the first
// push; until then the YAML limiters answer their domains and every other
// domain gets the reference's error.
func TestXDSNotReadyBeforeFirstPush(t *testing.T) {
	x := startXDSServer(t)
	ts := newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.EnvoyXDS = &EnvoyXDS{Server: x.addr, NodeID: "rl"}
	})
	conn := dial(t, ts.GRPCAddress())
	c := rlsv3.NewRateLimitServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	serving := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		h, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatal(err)
		}
		return h.Status
	}
	if code, _, _ := ts.do("GET", "/healthcheck", ""); code != 500 {
		t.Errorf("/healthcheck before the first push: %d, want 500", code)
	}
	if code, _, body := ts.do("GET", "/readyz", ""); code != 503 || !strings.Contains(string(body), `"node_id":"rl"`) {
		t.Errorf("/readyz before the first push: %d %s", code, body)
	}
	if got := serving("ratelimit"); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health before the first push: %v", got)
	}
	_, err := c.ShouldRateLimit(context.Background(), reqOf("edge", "remote_address", "10.0.0.1"))
	if st := status.Convert(err); st.Code() != codes.Unknown || st.Message() != errNoConfig {
		t.Errorf("an Envoy domain before the first push: %v", err)
	}
	if resp := ask(t, c, "leases", "user", "u1"); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Errorf("a YAML limiter's domain before the first push: %v", resp)
	}

	x.set(t, "rl", "1", edgeResource(2))
	waitUntil(t, "the first push", func() bool { return serving("ratelimit") == healthpb.HealthCheckResponse_SERVING })
	if serving("") != healthpb.HealthCheckResponse_SERVING {
		t.Error("the server's health is not SERVING after the first push")
	}
	if code, _, _ := ts.do("GET", "/healthcheck", ""); code != 200 {
		t.Errorf("/healthcheck after the first push: %d", code)
	}
	if code, _, body := ts.do("GET", "/readyz", ""); code != 200 || !strings.Contains(string(body), `"version":"1"`) {
		t.Errorf("/readyz after the first push: %d %s", code, body)
	}
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if got := ask(t, c, "edge", "remote_address", "10.0.0.1").OverallCode; got != want {
			t.Errorf("request %d: %v, want %v", i+1, got, want)
		}
	}
	// After the first push, an unknown domain is OK without a limit, as
	// in the reference.
	if resp := ask(t, c, "unknown", "k", "v"); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
		t.Errorf("an unknown domain: %v", resp)
	}
	// The status page and /json show the pushed domain as a file's.
	if code, _, body := ts.do("GET", "/status/data", "", "Authorization", "Bearer s3cret"); code != 200 ||
		!strings.Contains(string(body), `"envoy_domain":"edge"`) || !strings.Contains(string(body), `"envoy_domains":1`) {
		t.Errorf("/status/data does not show the pushed domain: %d %s", code, body)
	}
	if code, _, body := ts.do("POST", "/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.2"}]}]}`); code != 200 ||
		!strings.Contains(string(body), `"requestsPerUnit":2`) {
		t.Errorf("POST /json on the pushed domain: %d %s", code, body)
	}
}

// A refused push is NACKed, counted once, and sent back by the cache
// again and again: the client refuses it again no more than once a
// second. A good push then replaces it.
func TestXDSRefusedPush(t *testing.T) {
	x := startXDSServer(t)
	ts := newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.EnvoyXDS = &EnvoyXDS{Server: x.addr, StartWithoutConfig: true}
	})
	c := rlsv3.NewRateLimitServiceClient(dial(t, ts.GRPCAddress()))
	x.set(t, DefaultXDSNodeID, "1", edgeResource(2))
	waitUntil(t, "the first push", func() bool {
		resp, err := c.ShouldRateLimit(context.Background(), reqOf("edge", "remote_address", "a"))
		return err == nil && resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() == 2
	})
	bad := edgeResource(5)
	bad.Descriptors[0].RateLimit.Unit = rlsconfv3.RateLimitUnit_UNKNOWN
	x.set(t, DefaultXDSNodeID, "2", bad)
	waitUntil(t, "the NACK", func() bool { return x.nackCount() > 0 })
	time.Sleep(1500 * time.Millisecond) // the time in which a loop would NACK thousands of times
	if n := x.nackCount(); n > 3 {
		t.Errorf("%d NACKs of one version in 1.5s", n)
	}
	if got := testutil.ToFloat64(ts.metrics.reloads.WithLabelValues("failure")); got != 1 {
		t.Errorf("%v failed reloads counted for one refused version", got)
	}
	if resp := ask(t, c, "edge", "remote_address", "b"); resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 2 {
		t.Errorf("after a refused push: %v", resp)
	}
	x.set(t, DefaultXDSNodeID, "3", edgeResource(4))
	waitUntil(t, "the good push after the bad one", func() bool {
		return ask(t, c, "edge", "remote_address", "c").Statuses[0].CurrentLimit.GetRequestsPerUnit() == 4
	})
	if code, _, body := ts.do("GET", "/readyz", ""); code != 200 || strings.Contains(string(body), "last_reload_error") {
		t.Errorf("/readyz after a good push: %d %s", code, body)
	}
}

func reqOf(domain string, kv ...string) *rlsv3.RateLimitRequest {
	d := &rlsv3.RateLimitRequest{Domain: domain}
	d.Descriptors = append(d.Descriptors, descOf(kv...))
	return d
}

func descOf(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}
