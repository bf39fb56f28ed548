package server

import (
	"context"
	"path/filepath"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"
)

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

// spanNamed returns the ended span named name whose parent is the
// caller's span, failing the test when there is none.
func spanNamed(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, sp := range rec.Ended() {
		if sp.Name() == name && sp.Parent().SpanID().String() == callerSpan && sp.SpanContext().TraceID().String() == callerTrace {
			return sp
		}
	}
	t.Fatalf("no span %q joined to the caller's trace among %d", name, len(rec.Ended()))
	return nil
}

// childOf returns the ended spans whose parent is sp.
func childOf(rec *tracetest.SpanRecorder, sp sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, c := range rec.Ended() {
		if c.Parent().SpanID() == sp.SpanContext().SpanID() {
			out = append(out, c)
		}
	}
	return out
}

func attrs(sp sdktrace.ReadOnlySpan) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range sp.Attributes() {
		out[kv.Key] = kv.Value.String()
	}
	return out
}

// With a TracerProvider, a decision is a server span joined to the
// caller's traceparent, with its limiter or domain, its size and its
// answer, and a child span per store call: over HTTP and gRPC.
func TestTracing(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), envoyFile(2))
	ts := newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.EnvoyConfigDir = dir
		s.TracerProvider = tp
	})
	if code, _, b := ts.do("POST", "/v1/check", `{"limiter":"api","attributes":{"user":"u1"}}`, "traceparent", traceparent); code != 200 {
		t.Fatalf("check: %d %s", code, b)
	}
	check := spanNamed(t, rec, "POST /v1/check")
	// api has three rules; per-org, without an org, does not apply.
	if a := attrs(check); a[attrLimiter] != "api" || a[attrRules] != "2" || a[attrAllowed] != "true" || a["http.response.status_code"] != "200" {
		t.Errorf("the check's span: %v", a)
	}
	if kids := childOf(rec, check); len(kids) != 1 || kids[0].Name() != "floodgate.store consume" || attrs(kids[0])[attrAllowed] != "true" {
		t.Errorf("the check's store spans: %v", kids)
	}

	c := rlsv3.NewRateLimitServiceClient(dial(t, ts.GRPCAddress()))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{descOf("remote_address", "10.0.0.1")}}
	if _, err := c.ShouldRateLimit(ctx, req); err != nil {
		t.Fatal(err)
	}
	grpcSpan := spanNamed(t, rec, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")
	if a := attrs(grpcSpan); a[attrDomain] != "edge" || a[attrDescriptors] != "1" || a[attrOverallCode] != "OK" || a["rpc.system"] != "grpc" {
		t.Errorf("ShouldRateLimit's span: %v", a)
	}
	if kids := childOf(rec, grpcSpan); len(kids) == 0 {
		t.Error("ShouldRateLimit's span has no store span")
	}

	if code, _, b := ts.do("POST", "/json", `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.2"}]}]}`, "traceparent", traceparent); code != 200 {
		t.Fatalf("/json: %d %s", code, b)
	}
	if a := attrs(spanNamed(t, rec, "POST /json")); a[attrDomain] != "edge" || a[attrOverallCode] != "OK" {
		t.Errorf("/json's span: %v", a)
	}
	before := len(rec.Ended())
	ts.do("GET", "/healthz", "")
	if n := len(rec.Ended()); n != before {
		t.Errorf("/healthz made %d spans", n-before)
	}
}

// Without a TracerProvider, nothing of tracing is in the way: the Envoy
// service serves gRPC itself and the store is not wrapped.
func TestTracingOff(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "edge.yaml"), envoyFile(2))
	ts := newTestServer(t, testConfig, nil, func(s *Server) {
		s.GRPCAddr = "127.0.0.1:0"
		s.EnvoyConfigDir = dir
	})
	if _, ok := ts.rateLimitServer().(envoyFront); ok || ts.tracer != nil {
		t.Error("ShouldRateLimit goes through envoyFront without tracing or xDS")
	}
	for _, c := range ts.limiters.Load().chains {
		if _, ok := c.store.(*tracedStore); ok {
			t.Error("the store is traced without a TracerProvider")
		}
	}
}
