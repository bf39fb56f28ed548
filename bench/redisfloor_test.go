package bench

// BenchmarkRedisFloor measures what a decision costs the Redis server, next
// to the least any exact fixed-window limiter can cost it, in one run
// against one redis-server: a minimal script over one key (floor-1key) and
// over three keys (floor-3keys), floodgate's Redis store with one and three
// rules, and go-redis/redis_rate and ulule/limiter with one limit. Every
// contender is built once and warmed up on all 10,000 keys; then, for each
// number of concurrent callers, every contender runs once per round for a
// fixed time, in an order rotated each round, so that machine load drifting
// over the run falls on all of them alike. Each round reports decisions/s,
// the server's and this process's CPU time per decision, and the script
// calls per decision (below 1 where decisions share calls); the table
// printed at the end holds their medians and the ratios the goals name:
// server CPU per decision at most 1.3x the floor's at one caller and at
// most the floor's at 128, and at 128 callers at least 2x redis_rate's
// decisions/s. Limits are high enough that every request is admitted; one
// that is not fails the benchmark.
//
// Run (about 2 minutes): make bench-redis-floor, or
//
//	cd bench && go test -run '^$' -bench '^BenchmarkRedisFloor$' -benchtime 1x -timeout 30m
//
// REDISFLOOR_ROUNDS (default 6), REDISFLOOR_TIME (each run's measured
// time, default 500ms) and REDISFLOOR_CALLERS (default "1,16,128") make it
// longer or shorter.

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
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
	"github.com/redis/rueidis"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// floor1Script is the minimal exact fixed window on one key: count the
// hit, start the window's TTL on its first hit. ARGV: cost, window in ms.
const floor1Script = `local n = redis.call('INCRBY', KEYS[1], ARGV[1]); if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end; return n`

// floor3Script is floor1Script over every key of the call, key i's window
// in ARGV[i+1].
const floor3Script = `local n
for i, k in ipairs(KEYS) do
  n = redis.call('INCRBY', k, ARGV[1])
  if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', k, ARGV[i + 1]) end
end
return n`

// decideFunc decides one request for key number i (0 <= i < numKeys); nil
// means admitted.
type decideFunc func(ctx context.Context, i int) error

// evalshaFunc calls a script already loaded on the server by EVALSHA and
// returns its integer reply.
type evalshaFunc func(ctx context.Context, sha string, keys, args []string) (int64, error)

// floorClient opens a client for the floor scripts on addr, closed when b
// ends.
type floorClient struct {
	name string
	open func(b *testing.B, addr string) evalshaFunc
}

// floorClients are the clients the floors run on. The first is the one
// floodgate's Redis store runs on (rueidis), so the floor-1key and
// floor-3keys rows, which the ratios use, run on it; go-redis, redis_rate's
// client, gets rows of its own ("floor-1key/go-redis").
var floorClients = []floorClient{{"rueidis", rueidisFloor}, {"go-redis", goredisFloor}}

// rueidisFloor is a rueidis client configured as store/redis configures
// the one it opens for a redis:// URL (auto-pipelined, no client-side
// cache, no retries).
func rueidisFloor(b *testing.B, addr string) evalshaFunc {
	co, err := rueidis.ParseURL("redis://" + addr)
	if err != nil {
		b.Fatal(err)
	}
	co.Dialer.Timeout = 5 * time.Second
	co.DisableCache = true
	co.DisableRetry = true
	c, err := rueidis.NewClient(co)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return func(ctx context.Context, sha string, keys, args []string) (int64, error) {
		return c.Do(ctx, c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).AsInt64()
	}
}

// goredisFloor is a go-redis client as redis_rate's row uses it.
func goredisFloor(b *testing.B, addr string) evalshaFunc {
	c := newGoRedis(b, addr)
	return func(ctx context.Context, sha string, keys, args []string) (int64, error) {
		a := make([]any, len(args))
		for i, s := range args {
			a[i] = s
		}
		return c.EvalSha(ctx, sha, keys, a...).Int64()
	}
}

// newGoRedis is a go-redis client with a pool big enough that 128 callers
// never wait for a connection, closed when b ends.
func newGoRedis(b *testing.B, addr string) *goredis.Client {
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 256})
	b.Cleanup(func() { c.Close() })
	return c
}

// floorContender runs script over keys prefix+":user:N" for each prefix,
// with the windows (in ms) given, on client.
func floorContender(b *testing.B, srv *redistest.Server, client floorClient, script string, windows ...string) decideFunc {
	sum := sha1.Sum([]byte(script))
	sha := hex.EncodeToString(sum[:])
	if got := srv.MustDo("SCRIPT", "LOAD", script); got != sha {
		b.Fatalf("SCRIPT LOAD gave %s, want %s", got, sha)
	}
	keys := make([][]string, numKeys)
	for i := range keys {
		for r := range windows {
			keys[i] = append(keys[i], "floor"+strconv.Itoa(len(windows))+client.name+":r"+strconv.Itoa(r)+":user:"+strconv.Itoa(i))
		}
	}
	args := append([]string{"1"}, windows...)
	evalsha := client.open(b, srv.Addr)
	return func(ctx context.Context, i int) error {
		n, err := evalsha(ctx, sha, keys[i], args)
		if err == nil && n < 1 {
			err = fmt.Errorf("script returned %d", n)
		}
		return err
	}
}

// floodgateContender is a floodgate.Limiter named name over floodgate's
// Redis store with its default options, every rule keyed on "user".
func floodgateContender(b *testing.B, srv *redistest.Server, name string, rules ...floodgate.Rule) decideFunc {
	store, err := fgredis.New(&fgredis.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	for i := range rules {
		rules[i].Name = "r" + strconv.Itoa(i)
		rules[i].Key = []string{"user"}
	}
	// A deadline no run reaches: a timed-out decision would be a store
	// error, not a measurement.
	lim, err := floodgate.New(name, store, rules, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { lim.Close() })
	users := make([]string, numKeys)
	for i := range users {
		users[i] = strconv.Itoa(i)
	}
	return func(ctx context.Context, i int) error {
		d := lim.Allow(ctx, floodgate.Attributes{"user": users[i]})
		switch {
		case d.Err != nil:
			return d.Err
		case !d.Allowed:
			return fmt.Errorf("denied by rule %s", d.Rule)
		}
		return nil
	}
}

// redisRateContender is redis_rate with one limit (GCRA) per key.
func redisRateContender(b *testing.B, srv *redistest.Server) decideFunc {
	l := redis_rate.NewLimiter(newGoRedis(b, srv.Addr))
	limit := redis_rate.PerSecond(1 << 30)
	keys := make([]string, numKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return func(ctx context.Context, i int) error {
		r, err := l.Allow(ctx, keys[i], limit)
		if err == nil && r.Allowed < 1 {
			err = errors.New("denied")
		}
		return err
	}
}

// ululeContender is ulule/limiter's Redis store (a fixed window per key,
// INCRBY and PEXPIRE in a MULTI, its documented use) with one limit.
func ululeContender(b *testing.B, srv *redistest.Server) decideFunc {
	st, err := ulredis.NewStoreWithOptions(newGoRedis(b, srv.Addr), ulule.StoreOptions{Prefix: "ul", MaxRetry: 3})
	if err != nil {
		b.Fatal(err)
	}
	l := ulule.New(st, ulule.Rate{Period: time.Minute, Limit: 1 << 40})
	keys := make([]string, numKeys)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	return func(ctx context.Context, i int) error {
		r, err := l.Get(ctx, keys[i])
		if err == nil && r.Reached {
			err = errors.New("denied")
		}
		return err
	}
}

// floorContenders are the rows of BenchmarkRedisFloor, built on srv.
func floorContenders(b *testing.B, srv *redistest.Server) []namedDecide {
	const huge = 1 << 40 // never reached: every request is admitted
	fw := func(w time.Duration) floodgate.Rule {
		return floodgate.Rule{Algorithm: floodgate.FixedWindow, Limit: huge, Window: w}
	}
	clock := func(w time.Duration) floodgate.Rule { // the reference's (Envoy's) windows
		r := fw(w)
		r.Align = floodgate.AlignClock
		return r
	}
	var cs []namedDecide
	for i, c := range floorClients {
		suffix := ""
		if i > 0 {
			suffix = "/" + c.name
		}
		cs = append(cs,
			namedDecide{"floor-1key" + suffix, floorContender(b, srv, c, floor1Script, "60000")},
			namedDecide{"floor-3keys" + suffix, floorContender(b, srv, c, floor3Script, "1000", "60000", "3600000")})
	}
	return append(cs,
		// The same windows as the floors.
		namedDecide{"floodgate-1rule", floodgateContender(b, srv, "fw1", fw(time.Minute))},
		namedDecide{"floodgate-3rules", floodgateContender(b, srv, "fw3", fw(time.Second), fw(time.Minute), fw(time.Hour))},
		namedDecide{"floodgate-1rule-clock", floodgateContender(b, srv, "fc1", clock(time.Minute))},
		namedDecide{"floodgate-3rules-clock", floodgateContender(b, srv, "fc3", clock(time.Second), clock(time.Minute), clock(time.Hour))},
		namedDecide{"floodgate-1rule-tb", floodgateContender(b, srv, "tb1",
			floodgate.Rule{Algorithm: floodgate.TokenBucket, Limit: 1 << 30, Window: time.Second})},
		namedDecide{"floodgate-3algos", floodgateContender(b, srv, "mix3", fw(time.Minute),
			floodgate.Rule{Algorithm: floodgate.TokenBucket, Limit: 1 << 30, Window: time.Second},
			floodgate.Rule{Algorithm: floodgate.GCRA, Limit: 1 << 30, Window: time.Second})},
		namedDecide{"redis_rate", redisRateContender(b, srv)},
		namedDecide{"ulule", ululeContender(b, srv)},
	)
}

type namedDecide struct {
	name   string
	decide decideFunc
}

// floorSample is one timed run of one contender.
type floorSample struct {
	rate, serverUS, clientUS float64 // decisions/s, CPU µs per decision
	calls                    float64 // script calls (EVALSHA, EVAL) per decision
}

func BenchmarkRedisFloor(b *testing.B) {
	rounds := envInt(b, "REDISFLOOR_ROUNDS", 6)
	runTime := envDuration(b, "REDISFLOOR_TIME", 500*time.Millisecond)
	var callers []int
	for _, f := range strings.Split(cmp.Or(os.Getenv("REDISFLOOR_CALLERS"), "1,16,128"), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("REDISFLOOR_CALLERS: %q is not a positive number", f)
		}
		callers = append(callers, n)
	}

	srv := redistest.Start(b)
	cs := floorContenders(b, srv)
	for _, c := range cs { // every key exists, connections are warm
		if _, err := timedRun(b, srv, 128, 0, c.decide, func(i uint64) int { return int(i % numKeys) }, numKeys); err != nil {
			b.Fatalf("%s: warm-up: %v", c.name, err)
		}
	}
	samples := map[string][]floorSample{} // by "callers/contender"
	for _, n := range callers {
		for r := range rounds {
			for j := range cs {
				c := cs[(j+r)%len(cs)]
				s, err := timedRun(b, srv, n, runTime, c.decide, nil, 0)
				if err != nil {
					b.Fatalf("callers=%d %s: %v", n, c.name, err)
				}
				k := strconv.Itoa(n) + "/" + c.name
				samples[k] = append(samples[k], s)
			}
		}
	}

	med := map[string]floorSample{}
	for k, ss := range samples {
		med[k] = floorSample{
			rate:     median(ss, func(s floorSample) float64 { return s.rate }),
			serverUS: median(ss, func(s floorSample) float64 { return s.serverUS }),
			clientUS: median(ss, func(s floorSample) float64 { return s.clientUS }),
			calls:    median(ss, func(s floorSample) float64 { return s.calls }),
		}
	}
	fmt.Print(floorTable(cs, callers, rounds, runTime, samples, med))
	for _, n := range callers {
		for _, c := range cs {
			m := med[strconv.Itoa(n)+"/"+c.name]
			b.Run(fmt.Sprintf("callers=%d/%s", n, c.name), func(b *testing.B) {
				b.ReportMetric(0, "ns/op") // the medians below are the result
				b.ReportMetric(m.rate, "decisions/s")
				b.ReportMetric(m.serverUS, "server-cpu-µs/decision")
				b.ReportMetric(m.clientUS, "client-cpu-µs/decision")
				b.ReportMetric(m.calls, "script-calls/decision")
			})
		}
	}
}

// timedRun runs decide from callers goroutines. With total > 0 it makes
// exactly total decisions, key(i) for the i-th, and measures nothing (the
// warm-up). Otherwise each goroutine picks keys at random, and after a
// short lead-in (so that connections and the client's pipelines are busy)
// it measures d of steady load: decisions completed, and the CPU time the
// server and this process used meanwhile. It returns the first error.
func timedRun(b *testing.B, srv *redistest.Server, callers int, d time.Duration, decide decideFunc, key func(uint64) int, total uint64) (floorSample, error) {
	ctx := context.Background()
	var next, done atomic.Uint64
	var stop atomic.Bool
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			r := benchtool.NewRand()
			for !stop.Load() {
				i := r.Intn(numKeys)
				if total > 0 {
					n := next.Add(1)
					if n > total {
						return
					}
					i = key(n)
				}
				if err := decide(ctx, i); err != nil {
					once.Do(func() { first = err })
					stop.Store(true)
					return
				}
				done.Add(1)
			}
		})
	}
	if total > 0 {
		wg.Wait()
		return floorSample{}, first
	}
	time.Sleep(min(d/5, 100*time.Millisecond))
	n0, s0, c0, t0, e0 := done.Load(), srv.CPU(), benchtool.CPU(), time.Now(), scriptCalls(srv)
	time.Sleep(d)
	n1, s1, c1, t1, e1 := done.Load(), srv.CPU(), benchtool.CPU(), time.Now(), scriptCalls(srv)
	stop.Store(true)
	wg.Wait()
	if first != nil {
		return floorSample{}, first
	}
	n := float64(n1 - n0)
	if n == 0 {
		return floorSample{}, errors.New("no decision completed")
	}
	return floorSample{
		rate:     n / t1.Sub(t0).Seconds(),
		serverUS: float64((s1 - s0).Microseconds()) / n,
		clientUS: float64((c1 - c0).Microseconds()) / n,
		calls:    float64(e1-e0) / n,
	}, nil
}

// scriptCalls is how many script and function calls srv has served (INFO
// commandstats counts the commands a script runs too; those are left out).
func scriptCalls(srv *redistest.Server) int64 {
	c := srv.CommandCalls()
	return c["evalsha"] + c["eval"] + c["fcall"]
}

// floorTable is the markdown of the medians, per number of callers, and
// the ratios the goals are judged on.
func floorTable(cs []namedDecide, callers []int, rounds int, d time.Duration, samples map[string][]floorSample, med map[string]floorSample) string {
	var w strings.Builder
	fmt.Fprintf(&w, "\nMedians of %d rounds of %v per contender, one redis-server, contenders in rotated order each round.\n", rounds, d)
	for _, n := range callers {
		fmt.Fprintf(&w, "\n### %d concurrent callers\n\n", n)
		fmt.Fprintln(&w, "| contender | decisions/s | (min–max) | server CPU µs/decision | (min–max) | client CPU µs/decision | script calls/decision |")
		fmt.Fprintln(&w, "|---|---:|---:|---:|---:|---:|---:|")
		for _, c := range cs {
			k := strconv.Itoa(n) + "/" + c.name
			m, ss := med[k], samples[k]
			lo, hi := spread(ss, func(s floorSample) float64 { return s.rate })
			slo, shi := spread(ss, func(s floorSample) float64 { return s.serverUS })
			fmt.Fprintf(&w, "| %s | %.0f | %.0f–%.0f | %.2f | %.2f–%.2f | %.2f | %.2f |\n", c.name, m.rate, lo, hi, m.serverUS, slo, shi, m.clientUS, m.calls)
		}
	}
	ratios := []struct {
		name, target string
		f            func(n string) float64
	}{
		{"floodgate-1rule-clock server CPU / floor-1key", "≤ 1.3 (1), ≤ 1.0 (128)", func(n string) float64 {
			return med[n+"/floodgate-1rule-clock"].serverUS / med[n+"/floor-1key"].serverUS
		}},
		{"floodgate-3rules-clock server CPU / floor-3keys", "≤ 1.3 (1), ≤ 1.0 (128)", func(n string) float64 {
			return med[n+"/floodgate-3rules-clock"].serverUS / med[n+"/floor-3keys"].serverUS
		}},
		{"floodgate-1rule-clock decisions/s / redis_rate", "≥ 2 (128)", func(n string) float64 { return med[n+"/floodgate-1rule-clock"].rate / med[n+"/redis_rate"].rate }},
		{"floodgate-3rules-clock decisions/s / redis_rate", "≥ 2 (128)", func(n string) float64 { return med[n+"/floodgate-3rules-clock"].rate / med[n+"/redis_rate"].rate }},
		{"floodgate-1rule server CPU / floor-1key", "", func(n string) float64 { return med[n+"/floodgate-1rule"].serverUS / med[n+"/floor-1key"].serverUS }},
		{"floodgate-3rules server CPU / floor-3keys", "", func(n string) float64 { return med[n+"/floodgate-3rules"].serverUS / med[n+"/floor-3keys"].serverUS }},
		{"floodgate-1rule decisions/s / redis_rate", "", func(n string) float64 { return med[n+"/floodgate-1rule"].rate / med[n+"/redis_rate"].rate }},
		{"floodgate-1rule-tb server CPU / floor-1key", "", func(n string) float64 { return med[n+"/floodgate-1rule-tb"].serverUS / med[n+"/floor-1key"].serverUS }},
		{"floodgate-3algos server CPU / floor-3keys", "", func(n string) float64 { return med[n+"/floodgate-3algos"].serverUS / med[n+"/floor-3keys"].serverUS }},
	}
	fmt.Fprintf(&w, "\n### Ratios of medians\n\n| ratio | goal |")
	for _, n := range callers {
		fmt.Fprintf(&w, " callers=%d |", n)
	}
	fmt.Fprintf(&w, "\n|---|---|%s\n", strings.Repeat("---:|", len(callers)))
	for _, r := range ratios {
		fmt.Fprintf(&w, "| %s | %s |", r.name, r.target)
		for _, n := range callers {
			fmt.Fprintf(&w, " %.2f |", r.f(strconv.Itoa(n)))
		}
		fmt.Fprintln(&w)
	}
	return w.String()
}

func median(ss []floorSample, f func(floorSample) float64) float64 {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func spread(ss []floorSample, f func(floorSample) float64) (lo, hi float64) {
	v := make([]float64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	return slices.Min(v), slices.Max(v)
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		b.Fatalf("%s=%q: want a positive duration such as 2s", name, s)
	}
	return d
}
