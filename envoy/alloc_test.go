//go:build !race

// The race detector makes sync.Pool drop what it is given, so allocation
// counts are only meaningful without it.

package envoy_test

import (
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/internal/clocktest"
)

// A decision of one descriptor allocates its response and its counter key,
// and nothing else, on the memory store.
func TestOneDescriptorAllocations(t *testing.T) {
	svc := newInProcess(t, loadEdge(t), clocktest.New(t0))
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonv3.RateLimitDescriptor{desc("tenant", "t", "user", "vip")}}
	ctx := context.Background()
	got := testing.AllocsPerRun(100, func() {
		if _, err := svc.ShouldRateLimit(ctx, req); err != nil {
			t.Fatal(err)
		}
	})
	if got > 2 {
		t.Errorf("%v allocations per decision, want at most 2 (the response and the key)", got)
	}
}
