package grant_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/memory"
)

// gated holds every call to the store it wraps until open is sent the
// call's outcome: nil applies the call, an error fails it.
type gated struct {
	store.Store
	calls atomic.Int64
	open  chan error
}

func (g *gated) Apply(ctx context.Context, b *store.Batch) error {
	g.calls.Add(1)
	if err := <-g.open; err != nil {
		return err
	}
	return g.Store.Apply(ctx, b)
}

// TestOneCallPerKey: decisions on a key that need the inner store while
// another's call for the key is in flight make no call of their own: they
// wait for that one, fail with its failure at once, or are answered from
// the grant it took.
func TestOneCallPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := memory.New(&memory.Options{SweepInterval: -1})
		defer mem.Close()
		inner := &gated{Store: mem, open: make(chan error)}
		s := grant.New(inner, &grant.Options{Idle: -1})
		op := store.Op{Scope: "flight@1m", Key: "acme", Grant: true,
			Params: store.Params{Algorithm: store.FixedWindow, Limit: 3200, Window: time.Minute, Align: store.AlignClock}}
		// decide makes n decisions at once, lets the one call they make
		// end with outcome, and returns them with their errors.
		decide := func(n int, outcome error) ([]*store.Batch, []error) {
			bs := make([]*store.Batch, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range bs {
				bs[i] = &store.Batch{Mode: store.Consume, Now: time.Now(), Cost: 1, Ops: []store.Op{op}}
				wg.Go(func() { errs[i] = s.Apply(context.Background(), bs[i]) })
			}
			synctest.Wait() // each decision makes a call or waits for one
			if got := inner.calls.Load(); got != 1 {
				t.Fatalf("%d decisions at once made %d calls of the inner store, want 1", n, got)
			}
			inner.open <- outcome
			wg.Wait()
			inner.calls.Store(0)
			return bs, errs
		}

		hang := errors.New("store hung")
		_, errs := decide(8, hang)
		for i, err := range errs {
			if !errors.Is(err, hang) {
				t.Errorf("decision %d waiting for a failed call: %v, want its failure", i, err)
			}
		}
		bs, errs := decide(8, nil)
		for i, b := range bs {
			if errs[i] != nil || !b.Allowed {
				t.Errorf("decision %d waiting for a grant: allowed %v, %v; want admitted", i, b.Allowed, errs[i])
			}
		}
		if st := s.Stats(); st.Grants != 1 || st.Local != 7 {
			t.Errorf("stats %+v: want 1 grant, the 7 decisions that waited answered from it", st)
		}
	})
}
