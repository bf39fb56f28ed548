package server

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate/store"
)

// Tracing: with a TracerProvider, each decision request (POST /v1/check,
// /v1/record, /v1/select, /v1/refund and /json on HTTP, ShouldRateLimit
// on gRPC) is a server span, joined to the caller's trace when the
// request carries a W3C traceparent, and each store call it makes is a
// child span. Without one, none of this code runs.

// tracerName is the instrumentation scope of the service's spans.
const tracerName = "github.com/floodgate-go/floodgate/server"

// propagator reads the caller's trace context: W3C traceparent and
// tracestate, and baggage.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Span attributes floodgate sets.
const (
	attrLimiter     = attribute.Key("floodgate.limiter")
	attrRules       = attribute.Key("floodgate.rules")
	attrAllowed     = attribute.Key("floodgate.allowed")
	attrDomain      = attribute.Key("floodgate.envoy.domain")
	attrDescriptors = attribute.Key("floodgate.envoy.descriptors")
	attrOverallCode = attribute.Key("floodgate.envoy.overall_code")
	attrStoreOps    = attribute.Key("floodgate.store.rules")
	attrCost        = attribute.Key("floodgate.cost")
)

// traced returns st wrapped so that each store call is a span when the
// service traces (TracerProvider is set), and st itself otherwise.
func (s *Server) traced(st store.Store) store.Store {
	if s.tracer == nil {
		return st
	}
	return &tracedStore{Store: st, tracer: s.tracer}
}

// tracedStore is a store.Store decorator that makes each call a span,
// named after its mode, a child of the decision's.
type tracedStore struct {
	store.Store
	tracer trace.Tracer
}

// Apply applies b on the wrapped store within a span.
func (t *tracedStore) Apply(ctx context.Context, b *store.Batch) error {
	ctx, span := t.tracer.Start(ctx, "floodgate.store "+b.Mode.String(), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrStoreOps.Int(len(b.Ops)), attrCost.Int64(b.Cost)))
	err := t.Store.Apply(ctx, b)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	} else if b.Mode == store.Consume {
		span.SetAttributes(attrAllowed.Bool(b.Allowed))
	}
	span.End()
	return err
}

// tracedHTTP makes each request to h a server span named after its
// method and route, joined to the trace of the request's traceparent.
func (s *Server) tracedHTTP(route string, h http.Handler) http.Handler {
	if s.tracer == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := s.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", route)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.status))
		if sw.status >= 500 {
			span.SetStatus(otelcodes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// traceDecision notes a floodgate decision on the request's span: the
// limiter, how many of its rules decided, and the answer. It does nothing
// without tracing.
func (s *Server) traceDecision(ctx context.Context, limiter string, rules int, allowed bool) {
	if s.tracer == nil {
		return
	}
	trace.SpanFromContext(ctx).SetAttributes(attrLimiter.String(limiter), attrRules.Int(rules), attrAllowed.Bool(allowed))
}

// metadataCarrier reads a trace context from gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
