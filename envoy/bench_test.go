package envoy_test

import (
	"context"
	"strconv"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/store/memory"
)

// benchService is a Service on the memory store with a limit no benchmark
// reaches.
func benchService(b *testing.B) *envoy.Service {
	f, err := envoy.ParseFile("b.yaml", []byte(`domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`))
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := envoy.NewConfig(f)
	if err != nil {
		b.Fatal(err)
	}
	mem := memory.New(nil)
	b.Cleanup(func() { mem.Close() })
	svc, err := envoy.New(mem, cfg, &envoy.Options{Limiter: floodgate.Options{}})
	if err != nil {
		b.Fatal(err)
	}
	return svc
}

func benchRequests(n int, descs func(i int) []*commonv3.RateLimitDescriptor) []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: descs(i)}
	}
	return reqs
}

// BenchmarkShouldRateLimit measures one decision without the gRPC
// transport: 10k distinct keys, spread over the goroutines.
func BenchmarkShouldRateLimit(b *testing.B) {
	cases := map[string]func(i int) []*commonv3.RateLimitDescriptor{
		"1descriptor": func(i int) []*commonv3.RateLimitDescriptor {
			return []*commonv3.RateLimitDescriptor{desc("remote_address", strconv.Itoa(i))}
		},
		"3descriptors": func(i int) []*commonv3.RateLimitDescriptor {
			s := strconv.Itoa(i)
			return []*commonv3.RateLimitDescriptor{
				desc("remote_address", s), desc("tenant", "t", "user", s), desc("path", "/api/"+s),
			}
		},
	}
	for name, descs := range cases {
		b.Run(name, func(b *testing.B) {
			svc := benchService(b)
			reqs := benchRequests(10_000, descs)
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
					if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Errorf("%v %v", resp, err)
						return
					}
					i++
				}
			})
		})
	}
}
