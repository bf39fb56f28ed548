package redis_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redis"
)

// benchRules returns n rules (1 or 3) with limits high enough that every
// decision is admitted: per user, per tenant and global.
func benchRules(n int) []floodgate.Rule {
	rules := []floodgate.Rule{
		{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 1 << 40, Window: time.Hour, Key: []string{"user"}},
		{Name: "tenant", Algorithm: floodgate.TokenBucket, Limit: 1 << 30, Window: time.Second, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.GCRA, Limit: 1 << 30, Window: time.Second},
	}
	return rules[:n]
}

// benchClients are the store's client with and without coalescing.
var benchClients = []struct {
	name        string
	maxCoalesce int
}{
	{"rueidis", 0},
	{"rueidis-uncoalesced", 1},
}

// BenchmarkDecision measures admitted decisions per second through a
// limiter on the Redis store, by client, rule count and concurrent callers,
// over 10,000 users in 100 tenants.
//
// Run: go test -run '^$' -bench Decision ./store/redis/
func BenchmarkDecision(b *testing.B) {
	srv := redistest.Start(b)
	for _, cl := range benchClients {
		for _, rules := range []int{1, 3} {
			for _, callers := range []int{1, 16, 128} {
				b.Run(fmt.Sprintf("client=%s/rules=%d/callers=%d", cl.name, rules, callers), func(b *testing.B) {
					store, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, MaxCoalesce: cl.maxCoalesce})
					if err != nil {
						b.Fatal(err)
					}
					defer store.Close()
					lim, err := floodgate.New("bench", store, benchRules(rules), nil)
					if err != nil {
						b.Fatal(err)
					}
					runCallers(b, srv, callers, func(i uint64) bool {
						attrs := floodgate.Attributes{"user": strconv.FormatUint(i%10000, 10), "tenant": strconv.FormatUint(i%100, 10)}
						return lim.Allow(context.Background(), attrs).Allowed
					})
				})
			}
		}
	}
}

// runCallers runs b.N calls of f from the given number of goroutines and
// reports decisions/s, the CPU time of the redis-server process and of
// this one per decision, and decisions per script call. Every call must
// return true.
func runCallers(b *testing.B, srv *redistest.Server, callers int, f func(i uint64) bool) {
	for i := range uint64(200) { // warm up connections and the script cache
		f(i)
	}
	srv.MustDo("CONFIG", "RESETSTAT")
	serverCPU, clientCPU := srv.CPU(), benchtool.CPU()
	var next, failed atomic.Uint64
	n := uint64(b.N)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				if !f(i * 7919) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d of %d decisions not admitted", failed.Load(), n)
	}
	b.ReportMetric(float64(n)/el.Seconds(), "decisions/s")
	b.ReportMetric(float64(srv.CPU()-serverCPU)/1e3/float64(n), "server-cpu-µs/decision")
	b.ReportMetric(float64(benchtool.CPU()-clientCPU)/1e3/float64(n), "client-cpu-µs/decision")
	if calls, us, ok := serverCalls(srv); ok && calls > 0 {
		b.ReportMetric(float64(n)/float64(calls), "decisions/call")
		b.ReportMetric(us/float64(n), "in-script-µs/decision")
	}
}

// serverCalls is the number of FCALL calls since the last CONFIG
// RESETSTAT and the server's total time in them (µs), from INFO
// commandstats. A coalesced call carries several decisions.
func serverCalls(srv *redistest.Server) (calls int64, us float64, ok bool) {
	m := regexp.MustCompile(`cmdstat_fcall:calls=([0-9]+),usec=([0-9]+)`).FindStringSubmatch(srv.MustDo("INFO", "commandstats"))
	if m == nil {
		return 0, 0, false
	}
	calls, err1 := strconv.ParseInt(m[1], 10, 64)
	us, err2 := strconv.ParseFloat(m[2], 64)
	return calls, us, err1 == nil && err2 == nil
}

// BenchmarkBudget answers LLM requests on a per-tenant token budget (a
// reservable daily window, 1,000 tenants) from 16 callers, the two ways
// docs/gateway.md teaches: reserve 8,000 tokens and settle with the 3,000
// used (exact), or peek and record (cheap, overshooting under
// concurrency); either way two store calls, which coalescing shares
// between callers. A "decision" in the metrics is one answer, both calls.
// The budget's limiter has a per-user rule beside it (dailyBudget).
//
// Run: go test -run '^$' -bench Budget ./store/redis/
func BenchmarkBudget(b *testing.B) {
	srv := redistest.Start(b)
	for _, way := range []string{"reserve-settle", "peek-record"} {
		b.Run(way, func(b *testing.B) {
			lim := dailyBudget(b, "bench", serverStore(b, []string{srv.Addr}, false, nil), 1<<50, noonZone())
			ctx := context.Background()
			runCallers(b, srv, 16, func(i uint64) bool {
				attrs := floodgate.Attributes{"tenant": "tenant:" + strconv.FormatUint(i%1000, 10)}
				if way == "peek-record" {
					d, err := lim.Peek(ctx, attrs, 8000)
					if err != nil || !d.Allowed {
						return false
					}
					_, err = lim.Record(ctx, attrs, 3000)
					return err == nil
				}
				o, err := lim.Reserve(ctx, attrs, 8000, time.Minute)
				if err != nil || !o.Allowed {
					return false
				}
				s, err := lim.Settle(ctx, o.Ticket(), 3000)
				return err == nil && s == floodgate.Settled
			})
		})
	}
}
