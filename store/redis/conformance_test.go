package redis_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/floodgate-go/floodgate/storetest"
)

// undeadlined runs the store's calls without the limiters' deadline: the
// suite checks what the store answers, and a loaded test machine must not
// turn slow answers into failure-policy decisions. Deadlines and the breaker
// are tested in fault_test.go.
type undeadlined struct{ *redis.Store }

func (u undeadlined) Apply(ctx context.Context, b *store.Batch) error {
	return u.Store.Apply(context.WithoutCancel(ctx), b)
}

// TestConformance runs the store conformance suite against a real Redis,
// with the limiters' fake clock passed to the scripts (UseBatchTime) so that
// answers compare exactly with the reference model. The over-limit cache is
// off: it answers denied decisions without evaluating their other rules, so
// their per-rule detail is not the model's (cache_test.go covers it).
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return undeadlined{newStore(t, srv)}
	})
}
