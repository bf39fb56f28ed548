// Package faulty is a store for tests of what a store failure does: it
// fails or hangs on demand, and otherwise keeps its state in a memory
// store.
package faulty

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// ErrDown is the error of a failing Store.
var ErrDown = errors.New("test store: connection refused")

// Health is what a Store does with a batch.
type Health int32

const (
	Healthy Health = iota // applies it
	Failing               // returns ErrDown at once
	Hanging               // blocks until its context is done
)

// Store fails or hangs on demand. It is safe for concurrent use.
type Store struct {
	inner  *memory.Store
	health atomic.Int32
	calls  atomic.Int64
}

// New returns a Store of health h, closed when t ends.
func New(t testing.TB, h Health) *Store {
	s := &Store{inner: memory.New(&memory.Options{SweepInterval: -1})}
	t.Cleanup(func() { s.inner.Close() })
	s.Set(h)
	return s
}

// Set makes the store's health h.
func (s *Store) Set(h Health) { s.health.Store(int32(h)) }

// Calls is how many batches the store was given.
func (s *Store) Calls() int64 { return s.calls.Load() }

// Apply fails, hangs or applies b, as the store's health says.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	s.calls.Add(1)
	switch Health(s.health.Load()) {
	case Failing:
		return ErrDown
	case Hanging:
		<-ctx.Done()
		return ctx.Err()
	}
	return s.inner.Apply(ctx, b)
}
