// Package share gives a store each instance's share of every limit: a
// decorator that divides the limit (and burst) of every rule it applies by
// the number of instances that share the limits.
//
// Its use is the local fallback of a shared store: while Redis is down,
// each instance decides on its own memory store, and n instances each
// admitting 1/n of a limit admit together about what Redis would have.
//
//	fallback, _ := share.New(memory.New(nil), 4)
//	guarded, _ := guard.New(redisStore, &guard.Options{Fallback: fallback})
//	lim, _ := floodgate.New("api", guarded, rules, nil)
//
// The guard's circuit breaker decides when the shared store is down and
// when it is back; the fallback only answers in the meantime. When the
// shared store answers again, the guard records into it what its fallback
// admitted (see store/guard), so the instances' local admissions count in
// the store's window too.
package share

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/store"
)

// Store applies batches to an inner store with every limit divided among
// instances. It is safe for concurrent use if the inner store is.
type Store struct {
	inner store.Store
	n     int64
}

// New returns inner with limits divided among instances, which must be at
// least 1. Limits are rounded down, to at least 1.
func New(inner store.Store, instances int) (*Store, error) {
	if inner == nil {
		return nil, fmt.Errorf("share: inner store must not be nil")
	}
	if instances < 1 {
		return nil, fmt.Errorf("share: instances must be at least 1, got %d", instances)
	}
	return &Store{inner: inner, n: int64(instances)}, nil
}

// Apply applies b to the inner store under each instance's share of the
// limits. b's ops report the results; their parameters are left as given.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	var kept [8][2]int64
	saved := kept[:0]
	if len(b.Ops) > len(kept) {
		saved = make([][2]int64, 0, len(b.Ops))
	}
	for i := range b.Ops {
		p := &b.Ops[i].Params
		saved = append(saved, [2]int64{p.Limit, p.Burst})
		p.Limit = max(1, p.Limit/s.n)
		if p.Burst > 0 {
			p.Burst = max(1, p.Burst/s.n)
		}
	}
	err := s.inner.Apply(ctx, b)
	for i, l := range saved {
		b.Ops[i].Params.Limit, b.Ops[i].Params.Burst = l[0], l[1]
	}
	return err
}

// Unwrap returns the store s decorates, so that what it offers beyond
// store.Store (a Redis store's Ping) can be found.
func (s *Store) Unwrap() store.Store { return s.inner }
