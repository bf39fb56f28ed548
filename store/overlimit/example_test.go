package overlimit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/overlimit"
)

// asked counts the decisions that reach the store it wraps.
type asked struct {
	store.Store
	n int
}

func (a *asked) Apply(ctx context.Context, b *store.Batch) error {
	a.n++
	return a.Store.Apply(ctx, b)
}

// A client over its limit keeps retrying: after the first denial, the
// decorator answers it without asking the store behind it (here a memory
// store, in production a Redis one), until MaxAge has passed.
func ExampleNew() {
	mem := memory.New(nil)
	defer mem.Close()
	inner := &asked{Store: mem}
	clock := newExampleClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := floodgate.New("api", overlimit.New(inner, &overlimit.Options{MaxAge: 5 * time.Second}),
		[]floodgate.Rule{{Name: "per-key", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"key"}}},
		&floodgate.Options{Clock: clock})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	client := floodgate.Attributes{"key": "k-123"}
	for range 2 {
		limiter.Allow(ctx, client)
	}
	for range 1000 { // 100 retries a second for 10s
		clock.Advance(10 * time.Millisecond)
		limiter.Allow(ctx, client)
	}
	d := limiter.Allow(ctx, client)
	fmt.Println("allowed:", d.Allowed, "retry after:", d.RetryAfter)
	fmt.Println("store asked:", inner.n, "times for", 1003, "decisions")
	// Output:
	// allowed: false retry after: 50s
	// store asked: 4 times for 1003 decisions
}

// exampleClock is a Clock that moves only when Advance moves it, so the
// examples' output is exact; a real limiter leaves Options.Clock nil and
// reads the system clock.
type exampleClock struct{ ns atomic.Int64 }

func newExampleClock(t time.Time) *exampleClock {
	c := &exampleClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *exampleClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *exampleClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
