package bench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/internal/clock"
	"github.com/sethvargo/go-limiter/memorystore"
)

// BenchmarkFloor prices, on the machine at hand and in the same run as
// go-limiter's memorystore and floodgate's AllowKey (as BenchmarkCompare
// calls it), the steps no exact keyed limiter can skip: read
// the clock, find the key among 10,000, and update its state under a lock.
// The "floor" row does just those three steps and nothing else (no
// algorithm, no result), so it is a lower bound for any in-memory limiter
// that reads the clock per decision: a target below it cannot be met by
// making floodgate faster. docs/benchmarks.md sets it beside the memory
// store's goal: no slower than go-limiter.
//
// Run: cd bench && go test -run '^$' -bench Floor -benchmem -count 6
func BenchmarkFloor(b *testing.B) {
	keys := benchKeys()
	index := make(map[string]*int64, len(keys))
	for _, k := range keys {
		index[k] = new(int64)
	}
	fast := new(clock.Fast)
	var mu sync.Mutex
	var sink int64

	gl, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer gl.Close(context.Background())
	for _, k := range keys {
		if _, _, _, ok, err := gl.Take(context.Background(), k); err != nil || !ok {
			b.Fatal("go-limiter warm-up denied")
		}
	}

	allowKey, done := floodgateKeySetup(1)(b, keys)
	defer done()
	for i := range keys {
		if !allowKey(context.Background(), i) {
			b.Fatal("floodgate warm-up denied")
		}
	}

	steps := []struct {
		name string
		step func(i int) // decides for key number i
	}{
		{"clock/time.Now", func(int) { sink += time.Now().UnixNano() }},
		{"clock/floodgate-default", func(int) { sink += fast.Now().UnixNano() }},
		{"mutex/lock+unlock", func(int) { mu.Lock(); sink++; mu.Unlock() }},
		{"map/lookup-10k", func(i int) { sink += *index[keys[i]] }},
		{"floor/clock+lock+lookup+update", func(i int) {
			now := fast.Now().UnixNano()
			mu.Lock()
			*index[keys[i]] = now
			mu.Unlock()
		}},
		{"floodgate/key", func(i int) { allowKey(context.Background(), i) }},
		{"sethvargo-go-limiter", func(i int) {
			if _, _, _, ok, err := gl.Take(context.Background(), keys[i]); err != nil || !ok {
				b.Fatal("go-limiter denied")
			}
		}},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			r := benchtool.NewRand()
			cpu := benchtool.CPU()
			for b.Loop() {
				s.step(r.Intn(numKeys))
			}
			benchtool.ReportCPU(b, cpu)
		})
	}
	if sink == 42 {
		b.Log(sink) // keeps the steps' work from being optimised away
	}
}
