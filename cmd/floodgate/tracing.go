package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracing says how the service exports its traces: OTLP, to the endpoint
// of the standard OTEL_EXPORTER_OTLP_* variables (which the exporters
// read), with the settings below in front of the standard variables that
// say the same.
type tracing struct {
	// protocol is "http" (OTLP/HTTP, protobuf) or "grpc"; "" means
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
	// else http.
	protocol string
	// serviceName, serviceNamespace and serviceInstanceID, when set, are
	// the resource's service.name, service.namespace and
	// service.instance.id, over OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES.
	serviceName, serviceNamespace, serviceInstanceID string
	// defaultName is service.name when nothing sets it.
	defaultName string
	// samplingRate, when set, samples that share of the traces that do
	// not come sampled or unsampled from the caller (whose choice is
	// kept). nil means OTEL_TRACES_SAMPLER when set, else every trace.
	samplingRate *float64
}

// traceProtocol reads an OTLP protocol name.
func traceProtocol(name, v string) (string, error) {
	switch strings.ToLower(v) {
	case "http", "http/protobuf":
		return "http", nil
	case "grpc":
		return "grpc", nil
	}
	return "", fmt.Errorf("%s=%q: want http (http/protobuf) or grpc", name, v)
}

// newTracerProvider starts exporting traces as t says, reading the
// standard variables with getenv. OTEL_SDK_DISABLED=true turns tracing
// off (nil, nil). The provider's Shutdown flushes what is left.
func newTracerProvider(ctx context.Context, t *tracing, getenv func(string) string, logger *slog.Logger) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		logger.Info("tracing is configured, but OTEL_SDK_DISABLED=true: no traces are exported")
		return nil, nil
	}
	protocol := t.protocol
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := getenv(name); protocol == "" && v != "" {
			p, err := traceProtocol(name, v)
			if err != nil {
				return nil, err
			}
			protocol = p
		}
	}
	var client otlptrace.Client
	switch protocol {
	case "", "http":
		protocol, client = "http", otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return nil, fmt.Errorf("tracing protocol %q: want http or grpc", protocol)
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	// Defaults, then the standard variables, then floodgate's settings:
	// each overrides the ones before.
	defaults := []attribute.KeyValue{attribute.String("service.name", t.defaultName), attribute.String("service.instance.id", randomID())}
	var explicit []attribute.KeyValue
	for key, v := range map[string]string{"service.name": t.serviceName, "service.namespace": t.serviceNamespace, "service.instance.id": t.serviceInstanceID} {
		if v != "" {
			explicit = append(explicit, attribute.String(key, v))
		}
	}
	res, err := resource.New(ctx, resource.WithAttributes(defaults...), resource.WithFromEnv(), resource.WithAttributes(explicit...))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)}
	sampling := "OTEL_TRACES_SAMPLER"
	switch {
	case t.samplingRate != nil:
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*t.samplingRate))))
		sampling = strconv.FormatFloat(*t.samplingRate, 'g', -1, 64)
	case getenv("OTEL_TRACES_SAMPLER") == "":
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
		sampling = "1"
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { logger.Warn("tracing", "err", err) }))
	tp := sdktrace.NewTracerProvider(opts...)
	name, _ := res.Set().Value("service.name")
	logger.Info("tracing on", "protocol", protocol, "service_name", name.AsString(), "sampling", sampling)
	return tp, nil
}

// shutdownTracing flushes and stops tp, if any, within a few seconds.
func shutdownTracing(tp *sdktrace.TracerProvider, logger *slog.Logger) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		logger.Warn("tracing: flushing the last spans failed", "err", err)
	}
}

// randomID is a random UUID (version 4), the service.instance.id of an
// instance that is given none, as in the reference service.
func randomID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
