package overlimit_test

// Benchmarks of what a decision costs through the decorator and without it,
// over each store, through the public Limiter API on the wall clock:
//
//   - Denied: a flood on 64 keys that are all over their limit, the case
//     the decorator exists for (answered locally through it);
//   - Admitted: decisions that are admitted, which the decorator passes on
//     and learns nothing from: its overhead on the common path.
//
// cpu-ns/op is the process's CPU time per decision (all threads, so for
// Redis it counts the client side only).
//
// Run: go test -run '^$' -bench . -benchmem ./store/overlimit

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/overlimit"
)

func BenchmarkDenied(b *testing.B) {
	benchEach(b, floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}}, false)
}

func BenchmarkAdmitted(b *testing.B) {
	benchEach(b, floodgate.Rule{Name: "r", Algorithm: floodgate.TokenBucket, Limit: 1e9, Window: time.Second, Key: []string{"user"}}, true)
}

// benchEach runs parallel decisions of rule on 64 keys over each backend,
// bare and through the decorator, touching (and so, with a limit of 1,
// denying) every key before the timer starts.
func benchEach(b *testing.B, rule floodgate.Rule, allowed bool) {
	attrs := make([]floodgate.Attributes, 64)
	for i := range attrs {
		attrs[i] = floodgate.Attributes{"user": "u" + strconv.Itoa(i)}
	}
	for _, be := range backends {
		inner := be.start(b)(b)
		for _, kind := range []string{"bare", "overlimit"} {
			b.Run(be.name+"/"+kind, func(b *testing.B) {
				var st store.Store = inner
				if kind == "overlimit" {
					st = overlimit.New(inner, nil)
				}
				lim, err := floodgate.New("bench-"+kind, st, []floodgate.Rule{rule}, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer lim.Close()
				for _, a := range attrs {
					lim.Allow(ctx, a)
					lim.Allow(ctx, a)
				}
				b.ReportAllocs()
				b.ResetTimer()
				defer benchtool.ReportCPU(b, benchtool.CPU())
				b.RunParallel(func(pb *testing.PB) {
					r := benchtool.NewRand()
					for pb.Next() {
						if d := lim.Allow(ctx, attrs[r.Intn(len(attrs))]); d.Allowed != allowed {
							b.Errorf("allowed=%v, want %v: %+v", d.Allowed, allowed, d)
							return
						}
					}
				})
			})
		}
	}
}
