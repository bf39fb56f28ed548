package redis_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
)

// guarded is st under a guard of deadline timeout and breaker b, as the
// decision service runs a Redis store.
func guarded(t testing.TB, st store.Store, timeout time.Duration, b store.BreakerOptions) *guard.Store {
	t.Helper()
	g, err := guard.New(st, &guard.Options{Timeout: timeout, Breaker: b})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
