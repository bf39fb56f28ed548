package server

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/store/memory"
)

// BenchmarkEnvoyDecisionTracing measures one Envoy decision as the gRPC
// listener hands it to the service (what is registered for
// ShouldRateLimit, the transport left out), on the memory store, 10k
// keys: with tracing off, and on at 100% sampling with the SDK's batching
// processor (spans exported to nowhere) and a caller's traceparent.
func BenchmarkEnvoyDecisionTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			writeFile(b, filepath.Join(dir, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: hour, requests_per_unit: 1000000000}\n")
			c, err := config.ParseWith("b.yaml", []byte("store:\n  memory: {}\n"), config.Options{EnvoyDomains: true})
			if err != nil {
				b.Fatal(err)
			}
			mem := memory.New(nil)
			b.Cleanup(func() { mem.Close() })
			reg := prometheus.NewRegistry()
			s := &Server{Config: c, Store: mem, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", EnvoyConfigDir: dir,
				Registerer: reg, Gatherer: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
			ctx := context.Background()
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
				b.Cleanup(func() { tp.Shutdown(context.Background()) })
				s.TracerProvider = tp
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("traceparent", traceparent))
			}
			if err := s.Open(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			svc := s.rateLimitServer()
			reqs := make([]*rlsv3.RateLimitRequest, 10_000)
			for i := range reqs {
				reqs[i] = reqOf("edge", "remote_address", strconv.Itoa(i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}
