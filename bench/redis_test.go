package bench

// BenchmarkRedisCompare drives floodgate's Redis store and peer Go rate
// limiters that keep their state in Redis, on the same redis-server (started
// for the run on a loopback port), with the same workload: 10,000 keys, limits
// high enough that every request is admitted, 1, 16 and 128 concurrent
// callers. It also measures the server's own ceiling for a trivial EVALSHA
// with redis-benchmark, so every rate can be read as a fraction of it.
//
// sethvargo/go-limiter's Redis store (github.com/sethvargo/go-redisstore)
// is not included: its module could not be fetched here.
//
// Run: cd bench && go test -run '^$' -bench RedisCompare

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/internal/redistest"
	fgredis "github.com/floodgate-go/floodgate/store/redis"
	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// redisContender is one limiter under test: allow(i) decides for key i.
type redisContender struct {
	name string
	open func(b *testing.B, addr string) func(ctx context.Context, i uint64) bool
}

var redisContenders = []redisContender{
	{"floodgate-1rule", func(b *testing.B, addr string) func(context.Context, uint64) bool {
		return floodgateRedis(b, addr, 1)
	}},
	{"floodgate-3rules", func(b *testing.B, addr string) func(context.Context, uint64) bool {
		return floodgateRedis(b, addr, 3)
	}},
	{"redis_rate", func(b *testing.B, addr string) func(context.Context, uint64) bool {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 256})
		b.Cleanup(func() { c.Close() })
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.PerSecond(1 << 30)
		return func(ctx context.Context, i uint64) bool {
			r, err := l.Allow(ctx, "k"+strconv.FormatUint(i%numKeys, 10), limit)
			return err == nil && r.Allowed > 0
		}
	}},
	{"ulule", func(b *testing.B, addr string) func(context.Context, uint64) bool {
		c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 256})
		b.Cleanup(func() { c.Close() })
		store, err := ulredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "ul", MaxRetry: 3})
		if err != nil {
			b.Fatal(err)
		}
		l := ulule.New(store, ulule.Rate{Period: time.Hour, Limit: 1 << 40})
		return func(ctx context.Context, i uint64) bool {
			r, err := l.Get(ctx, "k"+strconv.FormatUint(i%numKeys, 10))
			return err == nil && !r.Reached
		}
	}},
}

// floodgateRedis is a limiter with 1 or 3 rules on floodgate's Redis store
// (rueidis, auto-pipelined): GCRA per key (redis_rate's algorithm), plus a
// token bucket per tenant and a fixed window over everything.
func floodgateRedis(b *testing.B, addr string, rules int) func(context.Context, uint64) bool {
	store, err := fgredis.New(&fgredis.Options{URL: "redis://" + addr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	rs := []floodgate.Rule{
		{Name: "key", Algorithm: floodgate.GCRA, Limit: 1 << 30, Window: time.Second, Key: []string{"k"}},
		{Name: "tenant", Algorithm: floodgate.TokenBucket, Limit: 1 << 30, Window: time.Second, Key: []string{"t"}},
		{Name: "all", Algorithm: floodgate.FixedWindow, Limit: 1 << 40, Window: time.Hour},
	}
	lim, err := floodgate.New("bench", store, rs[:rules], &floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context, i uint64) bool {
		attrs := floodgate.Attributes{"k": strconv.FormatUint(i%numKeys, 10), "t": strconv.FormatUint(i%100, 10)}
		return lim.Allow(ctx, attrs).Allowed
	}
}

func BenchmarkRedisCompare(b *testing.B) {
	srv := redistest.Start(b)
	for _, callers := range []int{1, 16, 128} {
		for _, c := range redisContenders {
			b.Run(fmt.Sprintf("callers=%d/%s", callers, c.name), func(b *testing.B) {
				allow := c.open(b, srv.Addr)
				runRedisCallers(b, srv, callers, allow)
			})
		}
	}
	b.Run("evalsha-ceiling", func(b *testing.B) { evalshaCeiling(b, srv) })
}

// runRedisCallers runs b.N decisions from the given number of goroutines
// and reports decisions/s; every decision must be an admission. It also
// reports the CPU time each decision cost this process (the limiter and
// its Redis client) and the redis-server process. CPU times, unlike rates,
// hold still when other work shares the machine, and their sum bounds the
// rate: client and server share its cores.
func runRedisCallers(b *testing.B, srv *redistest.Server, callers int, allow func(context.Context, uint64) bool) {
	ctx := context.Background()
	for i := range uint64(numKeys) { // every key touched once, connections warm
		if !allow(ctx, i) {
			b.Fatalf("warm-up decision %d not admitted", i)
		}
	}
	var next, failed atomic.Uint64
	n := uint64(b.N)
	b.ResetTimer()
	serverCPU, clientCPU := srv.CPU(), benchtool.CPU()
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				if !allow(ctx, i*7919) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	clientCPU, serverCPU = benchtool.CPU()-clientCPU, srv.CPU()-serverCPU
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d decisions not admitted", failed.Load(), n)
	}
	b.ReportMetric(float64(n)/el.Seconds(), "decisions/s")
	b.ReportMetric(float64(clientCPU.Microseconds())/float64(n), "client-cpu-µs/decision")
	b.ReportMetric(float64(serverCPU.Microseconds())/float64(n), "server-cpu-µs/decision")
}

// evalshaCeiling reports redis-benchmark's rate for EVALSHA of "return 1"
// (see redistest.Server.EvalshaCeiling) and the server CPU each call cost.
func evalshaCeiling(b *testing.B, srv *redistest.Server) {
	n := max(b.N, 200_000)
	cpu := srv.CPU()
	rps, err := srv.EvalshaCeiling(n)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(rps, "decisions/s")
	b.ReportMetric(float64((srv.CPU()-cpu).Microseconds())/float64(n), "server-cpu-µs/decision")
}
