package bench

// BenchmarkCompare drives floodgate's memory store and peer Go rate limiters
// with the same workload: 10,000 keys shaped like user:N, drawn uniformly at
// random by a per-goroutine generator, limits high enough that every
// request is admitted, every key touched once before the timer starts, the
// system clock. Each peer is used the way its documentation shows; notes on what
// each one does (and does not do) per request are in docs/benchmarks.md.
//
// Besides ns/op (wall time) each run reports cpu-ns/op, the process's CPU
// time per request: on a loaded machine wall time includes waiting for a
// core and CPU time mostly does not.
//
// Run: make bench-compare (or: cd bench && go test -run '^$' -bench Compare -benchmem)

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/go-chi/httprate"
	golimiter "github.com/sethvargo/go-limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// numKeys is the number of distinct keys every limiter sees.
const numKeys = 10_000

// allowFunc decides one request for key number i; it reports whether the
// request was admitted.
type allowFunc func(ctx context.Context, i int) bool

// contender is one limiter under test. setup builds it fresh and returns
// its decision function, which every goroutine calls, and a clean-up.
type contender struct {
	name  string
	setup func(tb testing.TB, keys []string) (allow allowFunc, done func())
}

var contenders = []contender{
	{"floodgate/key", floodgateKeySetup(1)},
	{"floodgate/attributes", floodgateAttrsSetup},
	{"floodgate/key/3-rules", floodgateKeySetup(3)},
	{"x-time-rate/mutex-map", rateMutexMapSetup},
	{"x-time-rate/sync-map", rateSyncMapSetup},
	{"ulule-limiter", ululeSetup},
	{"sethvargo-go-limiter", goLimiterSetup},
	{"throttled-gcra", throttledSetup},
	{"httprate-local-counter", httprateSetup},
}

// benchRules are floodgate's rules keyed on the "user" attribute, over the
// memory store with its defaults: a token bucket, then a fixed window and a
// GCRA rule, all with limits high enough to admit everything.
var benchRules = []floodgate.Rule{
	{Name: "per-user", Algorithm: floodgate.TokenBucket, Key: []string{"user"}, Limit: 1_000_000_000, Window: time.Second},
	{Name: "per-user-hour", Algorithm: floodgate.FixedWindow, Key: []string{"user"}, Limit: 1 << 40, Window: time.Hour},
	{Name: "per-user-gcra", Algorithm: floodgate.GCRA, Key: []string{"user"}, Limit: 1_000_000_000, Window: time.Second},
}

// floodgateKeySetup is floodgate called as the README's quick start calls
// it, lim.AllowKey(ctx, key), with the first n of benchRules.
func floodgateKeySetup(n int) func(testing.TB, []string) (allowFunc, func()) {
	return func(tb testing.TB, keys []string) (allowFunc, func()) {
		st := memory.New(nil)
		l, err := floodgate.New("bench", st, benchRules[:n], nil)
		if err != nil {
			tb.Fatal(err)
		}
		return allowFunc(func(ctx context.Context, i int) bool {
			return l.AllowKey(ctx, keys[i]).Allowed
		}), func() { st.Close() }
	}
}

// floodgateAttrsSetup is the one-rule limiter called with an Attributes
// literal in the call, as rules keyed on several attributes are called.
// The map stays on the caller's stack (no allocation) but is built and read
// per request, which the peers, taking a key string, do not pay.
func floodgateAttrsSetup(tb testing.TB, keys []string) (allowFunc, func()) {
	st := memory.New(nil)
	l, err := floodgate.New("bench", st, benchRules[:1], nil)
	if err != nil {
		tb.Fatal(err)
	}
	return allowFunc(func(ctx context.Context, i int) bool {
		return l.Allow(ctx, floodgate.Attributes{"user": keys[i]}).Allowed
	}), func() { st.Close() }
}

// rateMutexMapSetup is the idiom most Go services write: a mutex-guarded map
// from key to *rate.Limiter, created on first sight and never evicted.
func rateMutexMapSetup(tb testing.TB, keys []string) (allowFunc, func()) {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	return allowFunc(func(_ context.Context, i int) bool {
		mu.Lock()
		l := m[keys[i]]
		if l == nil {
			l = rate.NewLimiter(1e9, 1e9)
			m[keys[i]] = l
		}
		mu.Unlock()
		return l.Allow()
	}), func() {}
}

// rateSyncMapSetup is the same idiom over a sync.Map.
func rateSyncMapSetup(tb testing.TB, keys []string) (allowFunc, func()) {
	var m sync.Map
	return allowFunc(func(_ context.Context, i int) bool {
		v, ok := m.Load(keys[i])
		if !ok {
			v, _ = m.LoadOrStore(keys[i], rate.NewLimiter(1e9, 1e9))
		}
		return v.(*rate.Limiter).Allow()
	}), func() {}
}

// ululeSetup is ulule/limiter's in-memory store (fixed window).
func ululeSetup(tb testing.TB, keys []string) (allowFunc, func()) {
	l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: time.Hour, Limit: 1 << 40})
	return allowFunc(func(ctx context.Context, i int) bool {
		c, err := l.Get(ctx, keys[i])
		return err == nil && !c.Reached
	}), func() {}
}

// goLimiterSetup is sethvargo/go-limiter's memorystore.
func goLimiterSetup(tb testing.TB, keys []string) (allowFunc, func()) {
	st, err := memorystore.New(&memorystore.Config{Tokens: 1 << 40, Interval: time.Hour})
	if err != nil {
		tb.Fatal(err)
	}
	var _ golimiter.Store = st
	return allowFunc(func(ctx context.Context, i int) bool {
		_, _, _, ok, err := st.Take(ctx, keys[i])
		return err == nil && ok
	}), func() { st.Close(context.Background()) }
}

// throttledSetup is throttled's GCRA limiter over its memstore, bounded
// (LRU) at 65,536 keys like floodgate's store is bounded.
func throttledSetup(tb testing.TB, keys []string) (allowFunc, func()) {
	st, err := memstore.NewCtx(1 << 16)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(1_000_000_000), MaxBurst: 1_000_000_000})
	if err != nil {
		tb.Fatal(err)
	}
	return allowFunc(func(ctx context.Context, i int) bool {
		limited, _, err := l.RateLimitCtx(ctx, keys[i], 1)
		return err == nil && !limited
	}), func() {}
}

// httprateSetup is go-chi/httprate's local counter driven the way its
// RateLimiter.OnLimit drives it, minus the HTTP headers: under one limiter
// mutex, read the current and previous window counts, estimate the sliding
// rate, and increment when under the limit.
func httprateSetup(tb testing.TB, keys []string) (allowFunc, func()) {
	const window = time.Hour
	const limit = 1 << 40
	c := httprate.NewLocalLimitCounter(window)
	c.Config(limit, window)
	var mu sync.Mutex
	return allowFunc(func(_ context.Context, i int) bool {
		now := time.Now().UTC()
		cur := now.Truncate(window)
		prev := cur.Add(-window)
		mu.Lock()
		defer mu.Unlock()
		currCount, prevCount, err := c.Get(keys[i], cur, prev)
		if err != nil {
			return false
		}
		diff := now.Sub(cur)
		r := float64(prevCount)*(float64(window)-float64(diff))/float64(window) + float64(currCount)
		if int(r)+1 > limit {
			return false
		}
		return c.IncrementBy(keys[i], cur, 1) == nil
	}), func() {}
}

func benchKeys() []string {
	keys := make([]string, numKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkCompare runs every contender serially and on GOMAXPROCS
// goroutines (b.RunParallel).
func BenchmarkCompare(b *testing.B) {
	keys := benchKeys()
	for _, c := range contenders {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(c.name+"/"+mode, func(b *testing.B) {
				allow, done := c.setup(b, keys)
				defer done()
				ctx := context.Background()
				for i := range keys {
					if !allow(ctx, i) {
						b.Fatal("warm-up denied")
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				defer benchtool.ReportCPU(b, benchtool.CPU())
				if mode == "serial" {
					r := benchtool.NewRand()
					for b.Loop() {
						if !allow(ctx, r.Intn(numKeys)) {
							b.Fatal("denied")
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					r := benchtool.NewRand()
					for pb.Next() {
						if !allow(ctx, r.Intn(numKeys)) {
							b.Error("denied")
							return
						}
					}
				})
			})
		}
	}
}

// TestContendersAdmit checks that every contender's set-up works and admits
// under the benchmark's limits, so a benchmark never times a denial path.
func TestContendersAdmit(t *testing.T) {
	keys := benchKeys()[:100]
	for _, c := range contenders {
		allow, done := c.setup(t, keys)
		for i := range keys {
			if !allow(context.Background(), i) {
				t.Errorf("%s denied key %d", c.name, i)
			}
		}
		done()
	}
}
