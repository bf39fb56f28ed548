package server

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// envoyFront serves ShouldRateLimit in front of the Envoy service when
// there is more to do than decide: trace the call, or answer before the
// first xDS push (shouldRateLimit). Without either, the Envoy service is
// registered itself.
type envoyFront struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit implements envoy.service.ratelimit.v3.RateLimitService.
func (f envoyFront) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	s := f.s
	if s.tracer == nil {
		return s.shouldRateLimit(ctx, req)
	}
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = propagator.Extract(ctx, metadataCarrier(md))
	}
	ctx, span := s.tracer.Start(ctx, "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("rpc.system", "grpc"),
			attribute.String("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
			attribute.String("rpc.method", "ShouldRateLimit")))
	defer span.End()
	resp, err := s.shouldRateLimit(ctx, req)
	if err != nil {
		st := status.Convert(err)
		span.SetAttributes(attribute.Int("rpc.grpc.status_code", int(st.Code())))
		span.SetStatus(otelcodes.Error, st.Message())
	}
	return resp, err
}

// shouldRateLimit is the Envoy service's ShouldRateLimit, answered as the
// reference service answers before its first configuration while an xDS
// client waits for its first push, and noted on the request's span.
func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	var resp *rlsv3.RateLimitResponse
	var err error
	if s.xds != nil && !s.xds.loaded.Load() && req.GetDomain() != "" && len(req.GetDescriptors()) > 0 && s.limiter(req.GetDomain()) == nil {
		err = status.Error(codes.Unknown, errNoConfig)
	} else {
		resp, err = s.envoy.ShouldRateLimit(ctx, req)
	}
	if s.tracer != nil {
		span := trace.SpanFromContext(ctx)
		span.SetAttributes(attrDomain.String(req.GetDomain()), attrDescriptors.Int(len(req.GetDescriptors())))
		if resp != nil {
			span.SetAttributes(attrOverallCode.String(resp.GetOverallCode().String()))
		}
	}
	return resp, err
}
