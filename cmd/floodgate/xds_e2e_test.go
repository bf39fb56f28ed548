package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/testcert"
)

// controlPlane is an xDS management server as Envoy Gateway runs one for
// its rate limit service: go-control-plane's snapshot cache and server,
// over mutual TLS, on loopback. It records the NACKs it is sent.
type controlPlane struct {
	t     *testing.T
	addr  string
	creds *tls.Config
	cache cachev3.SnapshotCache
	srv   *grpc.Server

	mu    sync.Mutex
	nacks []string
}

// egNode is the node id Envoy Gateway gives its rate limit service.
const egNode = "envoy-ratelimit"

func startControlPlane(t *testing.T, addr string, creds *tls.Config) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t, creds: creds, cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	cp.listen(addr)
	t.Cleanup(cp.stop)
	return cp
}

// listen serves on addr (a port of 0 picks one).
func (cp *controlPlane) listen(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cp.t.Fatal(err)
	}
	cp.addr = ln.Addr().String()
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		if d := req.GetErrorDetail(); d != nil {
			cp.mu.Lock()
			cp.nacks = append(cp.nacks, d.GetMessage())
			cp.mu.Unlock()
		}
		return nil
	}}
	xds := serverv3.NewServer(context.Background(), cp.cache, cb)
	cp.srv = grpc.NewServer(grpc.Creds(credentials.NewTLS(cp.creds)))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(cp.srv, xds)
	go cp.srv.Serve(ln)
}

func (cp *controlPlane) stop() {
	if cp.srv != nil {
		cp.srv.Stop()
		cp.srv = nil
	}
}

// restart serves again on the same address, from a new cache, as a
// restarted Envoy Gateway does.
func (cp *controlPlane) restart() {
	cp.cache = cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)
	cp.listen(cp.addr)
}

// set makes cfgs the configuration of the rate limit service's node.
func (cp *controlPlane) set(version string, cfgs ...*rlsconfv3.RateLimitConfig) {
	cp.t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.RateLimitConfigType: res})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), egNode, snap); err != nil {
		cp.t.Fatal(err)
	}
}

func (cp *controlPlane) nacked(substr string) bool {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for _, n := range cp.nacks {
		if strings.Contains(n, substr) {
			return true
		}
	}
	return false
}

// egRoute is the descriptor key and value Envoy Gateway gives a route's
// rule, and egMatch the key of its per-client (distinct) match.
const (
	egRoute = "httproute/default/api/rule/0"
	egMatch = "rule-0-match-0"
)

// egDomain is a listener's domain as Envoy Gateway translates a
// BackendTrafficPolicy's global limit of limit requests an hour per
// client (a distinct header match).
func egDomain(domain string, limit uint32) *rlsconfv3.RateLimitConfig {
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: egRoute, Value: egRoute,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       egMatch,
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: limit},
		}},
	}}}
}

// egRequest is what Envoy asks for a request of client to domain; a cost
// of 0 only checks.
func egRequest(domain, client string, cost uint64) *rlsv3.RateLimitRequest {
	d := &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: egRoute, Value: egRoute}, {Key: egMatch, Value: client}}}
	if cost == 0 {
		d.HitsAddend = wrapperspb.UInt64(0)
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*commonv3.RateLimitDescriptor{d}}
}

// waitWithin is waitFor with a deadline of d.
func waitWithin(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEnvoyGatewayEnvironment starts floodgate with the environment Envoy
// Gateway gives the reference rate limit service (its ports and files
// moved to free loopback ports and temporary files), against a
// go-control-plane xDS server over mutual TLS, a real Redis and an OTLP
// receiver, and runs it through what a deployment lives through: the time
// before the first push, pushes, a removed domain, a push it must refuse,
// and the control plane away for ten seconds.
func TestEnvoyGatewayEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.NewCA(t, dir, "ca")
	certs := filepath.Join(dir, "certs")
	os.Mkdir(certs, 0o755)
	tlsCrt, tlsKey := ca.Issue(t, certs, "envoy-ratelimit") // the service's one certificate, as server and as xDS client
	cpCrt, cpKey := ca.Issue(t, dir, "envoy-gateway")
	proxyCrt, proxyKey := ca.Issue(t, dir, "envoy")
	cpPair, err := tls.LoadX509KeyPair(cpCrt, cpKey)
	if err != nil {
		t.Fatal(err)
	}
	cp := startControlPlane(t, "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cpPair}, ClientCAs: ca.Pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	otlp := startOTLPReceiver(t, false)
	redis := redistest.Start(t)
	mapper := filepath.Join(dir, "statsd-exporter", "conf.yaml")
	os.MkdirAll(filepath.Dir(mapper), 0o755)
	write(t, mapper, "mappings: []\n")
	_, promPort := freeAddr(t)
	env := map[string]string{
		"RUNTIME_ROOT": filepath.Join(dir, "data"), "RUNTIME_SUBDIRECTORY": "ratelimit", "RUNTIME_IGNOREDOTFILES": "true", "RUNTIME_WATCH_ROOT": "false",
		"LOG_LEVEL": "info", "USE_STATSD": "false",
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": cp.addr, "CONFIG_GRPC_XDS_NODE_ID": egNode,
		"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": tlsCrt, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": tlsKey,
		"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": ca.File,
		"GRPC_SERVER_USE_TLS":               "true", "GRPC_SERVER_TLS_CERT": tlsCrt, "GRPC_SERVER_TLS_KEY": tlsKey, "GRPC_SERVER_TLS_CA_CERT": ca.File,
		"FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": redis.Addr,
		"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "127.0.0.1:" + promPort, "PROMETHEUS_MAPPER_YAML": mapper,
		"TRACING_ENABLED": "true", "TRACING_SERVICE_NAME": "envoy-ratelimit", "TRACING_SERVICE_NAMESPACE": "envoy-gateway-system",
		"TRACING_SERVICE_INSTANCE_ID": "envoy-ratelimit-7d9c6f5b8-x2x7q", "TRACING_SAMPLING_RATE": "1.0", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL,
	}
	s := startReference(t, env)
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}

	// Before the first push: healthy, and answering as the reference does.
	if code, body := get(s.http + "/healthcheck"); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck before the first push: %d %q", code, body)
	}
	proxyPair, err := tls.LoadX509KeyPair(proxyCrt, proxyKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: ca.Pool, Certificates: []tls.Certificate{proxyPair}, ServerName: "envoy-ratelimit"})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rl := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	_, err = rl.ShouldRateLimit(ctx, egRequest("default/eg/http", "alice", 1))
	if st := status.Convert(err); st.Code() != codes.Unknown || st.Message() != "no rate limit configuration loaded" {
		t.Errorf("ShouldRateLimit before the first push: %v, want the reference's Unknown: no rate limit configuration loaded", err)
	}

	// Only clients with a certificate of the CA are served.
	for name, creds := range map[string]credentials.TransportCredentials{
		"plain text":              insecure.NewCredentials(),
		"TLS without certificate": credentials.NewTLS(&tls.Config{RootCAs: ca.Pool, ServerName: "envoy-ratelimit"}),
	} {
		c, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
			t.Errorf("a %s client was served", name)
		}
		c.Close()
	}

	// limitOf is a domain's limit for a new client, checked without
	// charging (0 when it has none).
	limitOf := func(domain string) uint32 {
		resp, err := rl.ShouldRateLimit(ctx, egRequest(domain, "probe", 0))
		if err != nil {
			return 0
		}
		return resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	ask := func(domain, client string) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := rl.ShouldRateLimit(ctx, egRequest(domain, client, 1))
		if err != nil {
			t.Fatalf("ShouldRateLimit(%s, %s): %v", domain, client, err)
		}
		return resp.OverallCode
	}
	enforces := func(domain, client string, limit int) {
		t.Helper()
		for i := range limit {
			if got := ask(domain, client); got != ok {
				t.Fatalf("%s, %s: request %d answered %v within the limit of %d", domain, client, i+1, got, limit)
			}
		}
		if got := ask(domain, client); got != over {
			t.Fatalf("%s, %s: request %d answered %v over the limit of %d", domain, client, limit+1, got, limit)
		}
	}

	// The first push is enforced.
	cp.set("1", egDomain("default/eg/http", 3), egDomain("default/eg/https", 2))
	waitFor(t, "the first push", func() bool { return limitOf("default/eg/http") == 3 })
	enforces("default/eg/http", "alice", 3)
	enforces("default/eg/https", "alice", 2)
	if code, body := get(s.debug + "/rlconfig"); code != 200 || !strings.Contains(body, "default/eg/http."+egRoute+"_"+egRoute+"."+egMatch+": unit=HOUR requests_per_unit=3") {
		t.Errorf("/rlconfig: %d\n%s", code, body)
	}
	if code, body := get(s.http + "/readyz"); code != 200 || !strings.Contains(body, `"version":"1"`) || !strings.Contains(body, `"connected":true`) {
		t.Errorf("/readyz after the first push: %d %s", code, body)
	}

	// A new version is served within 5s; a domain it drops is not.
	start := time.Now()
	cp.set("2", egDomain("default/eg/http", 5))
	waitFor(t, "the second push", func() bool { return limitOf("default/eg/http") == 5 })
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a new snapshot took %v to be served", took)
	}
	if got := ask("default/eg/https", "bob"); got != ok || limitOf("default/eg/https") != 0 {
		t.Errorf("the removed domain still limits: %v, limit %d", got, limitOf("default/eg/https"))
	}
	enforces("default/eg/http", "carol", 5)

	// A push it cannot serve is refused, and the last good one keeps serving.
	broken := &rlsconfv3.RateLimitConfig{Name: "broken", Domain: "broken", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}}}
	cp.set("3", egDomain("default/eg/http", 9), broken)
	waitWithin(t, "the NACK", 5*time.Second, func() bool { return cp.nacked("xds:broken: descriptors[0].rate_limit.unit") })
	if got := limitOf("default/eg/http"); got != 5 {
		t.Errorf("after a refused push the limit is %d, want the last good 5", got)
	}
	if got := ask("default/eg/http", "carol"); got != over {
		t.Errorf("after a refused push carol is %v, want still over the limit", got)
	}
	if code, body := get(s.http + "/readyz"); code != 200 || !strings.Contains(body, "xds:broken") {
		t.Errorf("/readyz does not report the refused push: %d %s", code, body)
	}
	if _, body := get("http://" + env["PROMETHEUS_ADDR"] + "/metrics"); !strings.Contains(body, `floodgate_config_reloads_total{result="failure"} 1`) {
		t.Errorf("the refused push is not counted as a failed reload:\n%s", grepLines([]byte(body), "reloads"))
	}

	// The control plane away for ten seconds changes nothing.
	cp.stop()
	away := time.Now()
	for time.Since(away) < 10*time.Second {
		if got := limitOf("default/eg/http"); got != 5 {
			t.Fatalf("with the control plane away the limit is %d, want 5", got)
		}
		if code, _ := get(s.http + "/healthcheck"); code != 200 {
			t.Fatalf("with the control plane away /healthcheck answers %d", code)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if got := ask("default/eg/http", "carol"); got != over {
		t.Errorf("with the control plane away carol is %v, want still over the limit", got)
	}
	// It comes back (restarted: its versions count from 1 again) with a
	// newer configuration, which is applied.
	cp.restart()
	cp.set("1", egDomain("default/eg/http", 7))
	waitWithin(t, "the configuration of the control plane back", 40*time.Second, func() bool { return limitOf("default/eg/http") == 7 })
	enforces("default/eg/http", "dave", 7)

	// Traces: a span per decision, named for the service, joined to the
	// caller's trace, with a child span per store call.
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	md := metadata.Pairs("traceparent", "00-"+traceID+"-"+parentID+"-01")
	if _, err := rl.ShouldRateLimit(metadata.NewOutgoingContext(ctx, md), egRequest("default/eg/http", "erin", 1)); err != nil {
		t.Fatal(err)
	}
	waitWithin(t, "the decision's span", 15*time.Second, func() bool {
		return len(otlp.find(func(sp receivedSpan) bool { return sp.traceID == traceID && sp.parentID == parentID })) > 0
	})
	decision := otlp.find(func(sp receivedSpan) bool { return sp.traceID == traceID && sp.parentID == parentID })[0]
	if decision.service != "envoy-ratelimit" || decision.name != "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" ||
		decision.attributes["floodgate.envoy.domain"] != "default/eg/http" || decision.attributes["floodgate.envoy.overall_code"] != "OK" {
		t.Errorf("the decision's span: %+v", decision)
	}
	waitWithin(t, "the store call's span", 15*time.Second, func() bool {
		return len(otlp.find(func(sp receivedSpan) bool {
			return sp.parentID == decision.spanID && strings.HasPrefix(sp.name, "floodgate.store ")
		})) > 0
	})
	if n := len(otlp.find(func(sp receivedSpan) bool {
		return sp.name == decision.name && sp.attributes["floodgate.envoy.domain"] == "default/eg/http"
	})); n < 20 {
		t.Errorf("%d decision spans, want one per decision", n)
	}
	var ready map[string]any
	if code, body := get(s.http + "/readyz"); code != 200 || json.Unmarshal([]byte(body), &ready) != nil {
		t.Errorf("/readyz at the end: %d %s", code, body)
	}
}
