package grant_test

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/floodgate-go/floodgate/storetest"
)

// openRedis returns a Redis store on srv that counts with the limiters'
// clock (UseBatchTime) and never gives up on a slow answer: the tests check
// what the stores answer, and a loaded machine must not turn slow answers
// into failures.
func openRedis(t testing.TB, srv *redistest.Server, useBatchTime bool) store.Store {
	t.Helper()
	s, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: useBatchTime})
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

func openMemory(t testing.TB) store.Store {
	s := memory.New(&memory.Options{SweepInterval: -1}) // see storetest's doc
	t.Cleanup(func() { s.Close() })
	return s
}

// exact are options under which every fixed window of the suite, however
// small its limit, is granted: half of what is left, down to one unit.
// Token buckets are left out: a local answer leaves out what refilled since
// the grant, so it is not the store's exact figure (see the package doc).
func exact() *grant.Options {
	return &grant.Options{
		Granted: func(op *store.Op) bool { return op.Params.Algorithm == store.FixedWindow },
		Share:   2, Min: 1, MaxHold: -1,
	}
}

func newGrant(t testing.TB, inner store.Store, opts *grant.Options) *grant.Store {
	s := grant.New(inner, opts)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store conformance suite against the decorator
// in front of one store: with one instance a granted key answers exactly as
// the bare store does, its remaining counting the grant's unspent units.
func TestConformance(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store { return newGrant(t, openMemory(t), exact()) })
	})
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		storetest.Run(t, func(t *testing.T) store.Store { return newGrant(t, openRedis(t, srv, true), exact()) })
	})
}

// TestConcurrentConformance runs the concurrent part of the suite against
// the decorator, every fixed window and token bucket granted, over a
// Redis store on the server's clock, as floodgate serve composes them.
func TestConcurrentConformance(t *testing.T) {
	srv := redistest.Start(t)
	s, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g := grant.New(s, &grant.Options{Min: 1, Granted: func(*store.Op) bool { return true }})
	defer g.Close()
	storetest.RunConcurrent(t, g, nil)
}
