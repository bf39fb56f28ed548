package overlimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/overlimit"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/floodgate-go/floodgate/storetest"
)

// backend is a kind of store the decorator must work over: start sets one
// up for a test (starting a redis-server, say) and returns what opens a
// fresh store of it.
type backend struct {
	name  string
	start func(t testing.TB) (open func(t testing.TB) store.Store)
}

var backends = []backend{
	{"memory", func(testing.TB) func(testing.TB) store.Store { return openMemory }},
	{"redis", func(t testing.TB) func(testing.TB) store.Store {
		srv := redistest.Start(t)
		return func(t testing.TB) store.Store { return openRedis(t, srv) }
	}},
}

func openMemory(t testing.TB) store.Store {
	s := memory.New(&memory.Options{SweepInterval: -1}) // see storetest's doc
	t.Cleanup(func() { s.Close() })
	return s
}

// openRedis returns a Redis store on srv that counts with the limiters'
// clock (UseBatchTime), as the decorator does, and without its own
// over-limit cache, and never gives up on a slow answer: the tests check
// what the stores answer, and a loaded machine must not turn slow answers
// into failure-policy decisions.
func openRedis(t testing.TB, srv *redistest.Server) store.Store {
	t.Helper()
	s, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return undeadlined{s}
}

type undeadlined struct{ store.Store }

func (u undeadlined) Apply(ctx context.Context, b *store.Batch) error {
	return u.Store.Apply(context.WithoutCancel(ctx), b)
}

// counted counts the batches, and the consumes among them, that reach the
// store it wraps.
type counted struct {
	store.Store
	calls, consumes atomic.Int64
}

func (c *counted) Apply(ctx context.Context, b *store.Batch) error {
	c.calls.Add(1)
	if b.Mode == store.Consume {
		c.consumes.Add(1)
	}
	return c.Store.Apply(ctx, b)
}

// TestConformance runs the store conformance suite against the decorator
// over each store, with denials remembered for as long as they hold (no
// MaxAge), so the suite's answers come from the decorator wherever it can
// give them.
func TestConformance(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			open := be.start(t)
			storetest.Run(t, func(t *testing.T) store.Store {
				return overlimit.New(open(t), &overlimit.Options{MaxAge: -1})
			})
		})
	}
}

// TestConformanceSmall runs the suite with a decorator of one denial and a
// MaxAge shorter than most waits, so denials are evicted and expire
// between the suite's steps.
func TestConformanceSmall(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return overlimit.New(openMemory(t), &overlimit.Options{Size: 1, MaxAge: time.Millisecond})
	})
}

// TestConcurrentConformance runs the concurrent part of the suite against
// the decorator over each store, as floodgate serve composes them: a Redis
// store on the server's clock, denials remembered as long as they hold.
func TestConcurrentConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		storetest.RunConcurrent(t, overlimit.New(openMemory(t), &overlimit.Options{MaxAge: -1}), nil)
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		s, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		storetest.RunConcurrent(t, overlimit.New(s, &overlimit.Options{MaxAge: -1}), nil)
	})
}
