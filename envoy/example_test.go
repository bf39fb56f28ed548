package envoy_test

import (
	"context"
	"fmt"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/store/memory"
)

func Example() {
	f, err := envoy.ParseFile("edge.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`))
	if err != nil {
		panic(err)
	}
	cfg, err := envoy.NewConfig(f)
	if err != nil {
		panic(err)
	}
	store := memory.New(nil)
	defer store.Close()
	clock := fixedClock(time.Date(2026, 1, 1, 12, 0, 45, 0, time.UTC))
	svc, err := envoy.New(store, cfg, &envoy.Options{Limiter: floodgate.Options{Clock: clock}})
	if err != nil {
		panic(err)
	}
	// In a server: svc.Register(grpcServer).
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{{
		Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}},
	}}}
	for range 3 {
		resp, _ := svc.ShouldRateLimit(context.Background(), req)
		s := resp.Statuses[0]
		fmt.Println(resp.OverallCode, s.LimitRemaining, s.DurationUntilReset.AsDuration())
	}
	// Output:
	// OK 1 15s
	// OK 0 15s
	// OVER_LIMIT 0 15s
}

// fixedClock is a Clock that always reads the same instant, so the
// example's output is exact; a real service leaves the clock nil and reads
// the system clock.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
