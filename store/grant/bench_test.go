package grant_test

// BenchmarkLocal is what a decision answered from a grant costs, next to
// the same decision of the memory store, both as a store sees them (one
// Batch through Apply: the decorator's own cost, without the deadline and
// circuit breaker that store/guard puts around a remote store); the goal
// is at most 2x memory and 0 allocs/op. The grant's key has a limit no run
// spends, so every timed decision is answered locally.
//
// Run: go test -run '^$' -bench Local -benchmem ./store/grant

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/memory"
)

func BenchmarkLocal(b *testing.B) {
	params := store.Params{Algorithm: store.FixedWindow, Limit: 1 << 50, Window: time.Hour, Align: store.AlignClock}
	mem := memory.New(&memory.Options{SweepInterval: -1})
	defer mem.Close()
	for _, c := range []struct {
		name string
		st   store.Store
	}{{"memory", batchOnly{mem}}, {"grant", grant.New(mem, &grant.Options{Idle: -1})}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			op := store.Op{Scope: "bench/" + c.name + "@1h", Key: "user:1", Params: params, Grant: true}
			batch := store.Batch{Mode: store.Consume, Cost: 1, Ops: []store.Op{op}}
			decide := func() {
				batch.Now, batch.Ops[0] = time.Now(), op
				if err := c.st.Apply(ctx, &batch); err != nil || !batch.Allowed {
					b.Fatalf("decision: %v, allowed %v", err, batch.Allowed)
				}
			}
			decide()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				decide()
			}
		})
	}
}

// batchOnly hides the memory store's Binder: the benchmark compares Apply
// with Apply.
type batchOnly struct{ store.Store }

// BenchmarkLocalLimiter is the same comparison through the public Limiter
// API (AllowKey on a global key): the memory store on its bound fast path
// (memory) and on the Batch path (memory-batch, its Binder hidden), and
// the grant store's local answers.
//
// Run: go test -run '^$' -bench LocalLimiter -benchmem ./store/grant
func BenchmarkLocalLimiter(b *testing.B) {
	rule := floodgate.Rule{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 1 << 50, Window: time.Hour, Align: floodgate.AlignClock, Grant: true}
	mem := memory.New(&memory.Options{SweepInterval: -1})
	defer mem.Close()
	for _, c := range []struct {
		name string
		st   store.Store
	}{{"memory", mem}, {"memory-batch", batchOnly{mem}}, {"grant", grant.New(mem, &grant.Options{Idle: -1})}} {
		b.Run(c.name, func(b *testing.B) {
			lim, err := floodgate.New("bench-"+c.name, c.st, []floodgate.Rule{rule}, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer lim.Close()
			ctx := context.Background()
			lim.AllowKey(ctx, "")
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if !lim.AllowKey(ctx, "").Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
