package envoy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoy"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store/memory"
)

// mixedRequests returns n requests of every shape the edge domain knows
// (several descriptors, replaces, unlimited, a limit of 0, shadow, limit
// overrides, over-limit charges given back, hits_addend 0), each on
// counters of its own, so that its answer depends only on its own shape
// and how many times it is asked.
func mixedRequests(n int) []*rlsv3.RateLimitRequest {
	withLimit := func(rpu uint32, kv ...string) *commonv3.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_MINUTE}
		return d
	}
	shapes := []func(v string) ([]*commonv3.RateLimitDescriptor, uint32){
		func(v string) ([]*commonv3.RateLimitDescriptor, uint32) {
			return []*commonv3.RateLimitDescriptor{desc("remote_address", v)}, 0
		},
		func(v string) ([]*commonv3.RateLimitDescriptor, uint32) {
			return []*commonv3.RateLimitDescriptor{
				desc("remote_address", v), desc("path", "/api/"+v), desc("tenant", "t", "user", v),
			}, 2
		},
		func(v string) ([]*commonv3.RateLimitDescriptor, uint32) {
			return []*commonv3.RateLimitDescriptor{
				desc("category", "read", "user", v), desc("endpoint", "report", "user", v), desc("path", "/health"),
			}, 0
		},
		func(v string) ([]*commonv3.RateLimitDescriptor, uint32) {
			return []*commonv3.RateLimitDescriptor{desc("category", "read", "user", v)}, 0
		},
		func(v string) ([]*commonv3.RateLimitDescriptor, uint32) {
			return []*commonv3.RateLimitDescriptor{desc("remote_address", "50.0.0.5"), desc("shadowed", v)}, 0
		},
		func(v string) ([]*commonv3.RateLimitDescriptor, uint32) {
			return []*commonv3.RateLimitDescriptor{
				desc("remote_address", v), withLimit(1, "remote_address", v), desc("batch", v), desc("nothing", v),
			}, 0
		},
		func(v string) ([]*commonv3.RateLimitDescriptor, uint32) {
			return []*commonv3.RateLimitDescriptor{withHits(desc("bucket", v), 0), desc("remote_address", v)}, 4
		},
	}
	reqs := make([]*rlsv3.RateLimitRequest, n)
	for i := range reqs {
		descs, hits := shapes[i%len(shapes)](fmt.Sprint("v", i))
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs, HitsAddend: hits}
	}
	return reqs
}

func newInProcess(t *testing.T, cfg *envoy.Config, clock floodgate.Clock) *envoy.Service {
	t.Helper()
	mem := memory.New(&memory.Options{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	svc, err := envoy.New(mem, cfg, &envoy.Options{Limiter: floodgate.Options{Clock: clock}})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// The working memory of a decision is recycled between calls: answers
// must not depend on what the calls before them, or beside them, asked.
// Each request is asked three times, in order on one service, and
// shuffled across concurrent callers on another.
func TestRecycledScratchKeepsAnswersApart(t *testing.T) {
	cfg := loadEdge(t)
	clock := clocktest.New(t0)
	reqs := mixedRequests(300)
	ctx := context.Background()
	const asks = 3

	seq := newInProcess(t, cfg, clock)
	want := make([][]*rlsv3.RateLimitResponse, len(reqs))
	for i, req := range reqs {
		for range asks {
			resp, err := seq.ShouldRateLimit(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			want[i] = append(want[i], resp)
		}
	}

	par := newInProcess(t, cfg, clock)
	order := make([]int, 0, asks*len(reqs))
	for range asks {
		for i := range reqs {
			order = append(order, i)
		}
	}
	rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	// Each request's answers must come in order: one caller owns each
	// request, and callers interleave.
	const callers = 8
	got := make([][]*rlsv3.RateLimitResponse, len(reqs))
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for _, i := range order {
				if i%callers != c {
					continue
				}
				resp, err := par.ShouldRateLimit(ctx, reqs[i])
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = append(got[i], resp)
			}
		})
	}
	wg.Wait()
	for i := range reqs {
		for k := range asks {
			if !proto.Equal(got[i][k], want[i][k]) {
				t.Errorf("request %d, ask %d:\n got %v\nwant %v", i, k, got[i][k], want[i][k])
			}
		}
	}
	// Every response is the caller's own: changing one changes no other.
	want[0][0].Statuses[0].Code = rlsv3.RateLimitResponse_UNKNOWN
	for i := range reqs {
		for k := range asks {
			if (i != 0 || k != 0) && want[i][k].Statuses[0].Code == rlsv3.RateLimitResponse_UNKNOWN {
				t.Fatalf("request %d, ask %d shares its status with request 0", i, k)
			}
		}
	}
}
