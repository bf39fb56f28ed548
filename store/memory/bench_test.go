package memory_test

// Benchmarks of the memory store through the public Limiter API.
//
// Every benchmark prebuilds its request attributes (one Attributes map per
// key) before the timer starts and touches every key once, so the timed loop
// measures decisions on existing keys; BenchmarkAttributesPerCall builds the
// map in the call instead. Keys are drawn uniformly at random by a
// per-goroutine generator. Limits are high enough that every decision is
// admitted (the costlier path: a ticket id and a charge) unless the name says
// "denied". The limiter reads the system clock, as in production.
//
// Besides ns/op (wall time), the decision loops report cpu-ns/op: the
// process's CPU time (user + system, all threads) per decision. On a shared,
// loaded machine wall time includes time spent waiting for a core, CPU time
// mostly does not; and for parallel runs, a cpu-ns/op equal to the serial
// one means the work scales linearly with cores.
//
// Run: go test -run '^$' -bench . -benchmem ./store/memory

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// benchAttrs returns n prebuilt attribute maps: a distinct user and ip per
// map and n/100 (at least 1) tenants.
func benchAttrs(n int) []floodgate.Attributes {
	tenants := max(1, n/100)
	out := make([]floodgate.Attributes, n)
	for i := range out {
		out[i] = floodgate.Attributes{
			"user":   "user-" + strconv.Itoa(i),
			"tenant": "tenant-" + strconv.Itoa(i%tenants),
			"ip":     "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255),
		}
	}
	return out
}

// Rules whose limits are never reached in a benchmark run.
var (
	benchTokenBucket = floodgate.Rule{Name: "per-user", Algorithm: floodgate.TokenBucket,
		Limit: 1_000_000_000, Window: time.Second, Key: []string{"user"}}
	benchThreeRules = []floodgate.Rule{
		benchTokenBucket,
		{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 1 << 40, Window: time.Hour, Key: []string{"tenant"}},
		{Name: "per-ip", Algorithm: floodgate.SlidingWindow, Limit: 1 << 40, Window: time.Minute, Key: []string{"ip"}},
	}
	benchAlgorithms = []floodgate.Rule{
		{Name: "fixed_window", Algorithm: floodgate.FixedWindow, Limit: 1 << 40, Window: time.Hour, Key: []string{"user"}},
		{Name: "sliding_window", Algorithm: floodgate.SlidingWindow, Limit: 1 << 40, Window: time.Minute, Key: []string{"user"}},
		{Name: "token_bucket", Algorithm: floodgate.TokenBucket, Limit: 1_000_000_000, Window: time.Second, Key: []string{"user"}},
		{Name: "gcra", Algorithm: floodgate.GCRA, Limit: 1_000_000_000, Window: time.Second, Key: []string{"user"}},
	}
)

// benchLimiter returns a limiter over a fresh store sized to hold every key
// of nkeys attribute maps without eviction, with every key already present.
func benchLimiter(b *testing.B, rules []floodgate.Rule, attrs []floodgate.Attributes) *floodgate.Limiter {
	b.Helper()
	st := memory.New(&memory.Options{MaxKeys: max(1024, 4*len(attrs)), SweepInterval: -1})
	b.Cleanup(func() { st.Close() })
	l, err := floodgate.New("bench", st, rules, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, a := range attrs {
		if d := l.Allow(ctx, a); !d.Allowed {
			b.Fatalf("warm-up denied: %+v", d)
		}
	}
	return l
}

// runDecisions times l.Allow over attrs drawn uniformly at random, on one
// goroutine or on GOMAXPROCS of them.
func runDecisions(b *testing.B, l *floodgate.Limiter, attrs []floodgate.Attributes, parallel bool) {
	ctx := context.Background()
	n := len(attrs)
	b.ReportAllocs()
	b.ResetTimer()
	defer benchtool.ReportCPU(b, benchtool.CPU())
	if !parallel {
		r := benchtool.NewRand()
		for b.Loop() {
			if d := l.Allow(ctx, attrs[r.Intn(n)]); !d.Allowed {
				b.Fatal("denied")
			}
		}
		return
	}
	b.RunParallel(func(pb *testing.PB) {
		r := benchtool.NewRand()
		for pb.Next() {
			if d := l.Allow(ctx, attrs[r.Intn(n)]); !d.Allowed {
				b.Error("denied")
				return
			}
		}
	})
}

var benchKeyCounts = []struct {
	name string
	n    int
}{{"keys=1", 1}, {"keys=10k", 10_000}, {"keys=1M", 1_000_000}}

// BenchmarkLimiter is the headline: one token-bucket rule, or three rules
// (token bucket per user, fixed window per tenant, sliding window per ip),
// over 1, 10k and 1M existing keys, serial and parallel.
func BenchmarkLimiter(b *testing.B) {
	for _, rs := range []struct {
		name  string
		rules []floodgate.Rule
	}{{"rules=1", []floodgate.Rule{benchTokenBucket}}, {"rules=3", benchThreeRules}} {
		for _, k := range benchKeyCounts {
			if testing.Short() && k.n > 10_000 {
				continue
			}
			b.Run(rs.name+"/"+k.name, func(b *testing.B) {
				attrs := benchAttrs(k.n)
				l := benchLimiter(b, rs.rules, attrs)
				for _, mode := range []string{"serial", "parallel"} {
					b.Run(mode, func(b *testing.B) {
						runDecisions(b, l, attrs, mode == "parallel")
					})
				}
			})
		}
	}
}

// BenchmarkAlgorithm runs each rate algorithm alone: one rule, 10k keys.
func BenchmarkAlgorithm(b *testing.B) {
	attrs := benchAttrs(10_000)
	for _, r := range benchAlgorithms {
		b.Run(r.Name, func(b *testing.B) {
			l := benchLimiter(b, []floodgate.Rule{r}, attrs)
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(mode, func(b *testing.B) {
					runDecisions(b, l, attrs, mode == "parallel")
				})
			}
		})
	}
	// A concurrency lease must be released, so this one times a pair:
	// acquire (Allow) and release (Refund of its ticket).
	b.Run("concurrency/acquire+release", func(b *testing.B) {
		l := benchLimiter(b, []floodgate.Rule{{Name: "leases", Algorithm: floodgate.Concurrency,
			Limit: 1 << 20, Window: time.Minute, Key: []string{"user"}}}, attrs)
		ctx := context.Background()
		r := benchtool.NewRand()
		b.ReportAllocs()
		defer benchtool.ReportCPU(b, benchtool.CPU())
		for b.Loop() {
			d := must(l.Decide(ctx, floodgate.ModeConsume, attrs[r.Intn(len(attrs))], 1))
			if !d.Allowed {
				b.Fatal("denied")
			}
			if err := l.Refund(ctx, d.Ticket()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkObserved is rules=1/keys=10k/serial with an Observer set, as a
// service that counts decisions in metrics runs: the Event's per-rule
// results are the observer's to keep, one allocation per decision.
func BenchmarkObserved(b *testing.B) {
	attrs := benchAttrs(10_000)
	st := memory.New(&memory.Options{MaxKeys: 4 * len(attrs), SweepInterval: -1})
	b.Cleanup(func() { st.Close() })
	var admitted atomic.Int64
	l, err := floodgate.New("bench", st, []floodgate.Rule{benchTokenBucket}, &floodgate.Options{
		Observer: func(_ context.Context, e floodgate.Event) {
			if e.Decision.Allowed {
				admitted.Add(1)
			}
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	runDecisions(b, l, attrs, false)
	if admitted.Load() == 0 {
		b.Fatal("the observer saw no decision")
	}
}

// BenchmarkDenied floods one key that is over its limit: the path a hot
// abusive key takes (reads, no writes).
func BenchmarkDenied(b *testing.B) {
	st := memory.New(&memory.Options{SweepInterval: -1})
	b.Cleanup(func() { st.Close() })
	l, err := floodgate.New("bench", st, []floodgate.Rule{{Name: "per-user",
		Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Hour, Key: []string{"user"}}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	attrs := floodgate.Attributes{"user": "flooder"}
	for range 10 {
		l.Allow(ctx, attrs)
	}
	b.ReportAllocs()
	defer benchtool.ReportCPU(b, benchtool.CPU())
	for b.Loop() {
		if d := l.Allow(ctx, attrs); d.Allowed {
			b.Fatal("admitted")
		}
	}
}

// BenchmarkAttributesPerCall writes the request's Attributes as a literal in
// the call, as most callers do; the limiter does not let the map escape, so
// it stays on the caller's stack. Compare with
// BenchmarkLimiter/rules=1/keys=10k/serial, which reuses prebuilt maps.
func BenchmarkAttributesPerCall(b *testing.B) {
	attrs := benchAttrs(10_000)
	users := make([]string, len(attrs))
	for i, a := range attrs {
		users[i] = a["user"]
	}
	l := benchLimiter(b, []floodgate.Rule{benchTokenBucket}, attrs)
	ctx := context.Background()
	r := benchtool.NewRand()
	b.ReportAllocs()
	defer benchtool.ReportCPU(b, benchtool.CPU())
	for b.Loop() {
		if d := l.Allow(ctx, floodgate.Attributes{"user": users[r.Intn(len(users))]}); !d.Allowed {
			b.Fatal("denied")
		}
	}
}

// BenchmarkEviction sends 1M distinct keys through a store capped at 10k:
// nearly every decision inserts a key and evicts another (a flood of random
// client addresses).
func BenchmarkEviction(b *testing.B) {
	attrs := benchAttrs(1_000_000)
	if testing.Short() {
		attrs = attrs[:100_000]
	}
	st := memory.New(&memory.Options{MaxKeys: 10_000, SweepInterval: -1})
	b.Cleanup(func() { st.Close() })
	l, err := floodgate.New("bench", st, []floodgate.Rule{benchTokenBucket}, nil)
	if err != nil {
		b.Fatal(err)
	}
	runDecisions(b, l, attrs, false)
}

// TestSameKeyUnderManyRules keeps several rules' state for one key value
// side by side (the store indexes a key once and chains its rules), and
// checks that each rule counts on its own and that keys expire and are
// forgotten one rule at a time.
func TestSameKeyUnderManyRules(t *testing.T) {
	clock := clocktest.New(time.Unix(1_700_000_000, 0))
	st := memory.New(&memory.Options{Shards: 1, SweepInterval: -1})
	defer st.Close()
	rules := []floodgate.Rule{
		{Name: "short", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Second, Key: []string{"user"}},
		{Name: "medium", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"}},
		{Name: "long", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour, Key: []string{"user"}},
	}
	l, err := floodgate.New("chain", st, rules, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := floodgate.Attributes{"user": "alice"}
	remaining := func() []int64 {
		d, err := l.Decide(ctx, floodgate.ModePeek, a, 1)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, r := range d.Rules {
			out = append(out, r.Remaining)
		}
		return out
	}
	if d := l.Allow(ctx, a); !d.Allowed {
		t.Fatal("first request denied")
	}
	if got, want := st.Len(), 3; got != want {
		t.Fatalf("Len() = %d after one request under 3 rules, want %d", got, want)
	}
	if got, want := fmt.Sprint(remaining()), "[0 1 2]"; got != want {
		t.Fatalf("remaining = %s, want %s", got, want)
	}
	clock.Advance(2 * time.Second) // the short window rolls
	if d := l.Allow(ctx, a); !d.Allowed {
		t.Fatal("second request denied")
	}
	clock.Advance(2 * time.Minute) // the short and medium windows roll
	if got, want := fmt.Sprint(remaining()), "[1 2 1]"; got != want {
		t.Fatalf("remaining = %s, want %s", got, want)
	}
	// A peek writes nothing, so the passed windows stay for the sweeper
	// (an earlier-timed decision may still count in them).
	if got, want := st.Len(), 3; got != want {
		t.Fatalf("Len() = %d after a peek of two passed windows, want %d", got, want)
	}
	if d := l.Allow(ctx, a); !d.Allowed || d.Remaining != 0 || d.Rule != "long" {
		t.Fatalf("third request: Allowed=%v Remaining=%d Rule=%q, want true 0 long", d.Allowed, d.Remaining, d.Rule)
	}
	if d := l.Allow(ctx, a); d.Allowed || d.Rule != "long" {
		t.Fatalf("fourth request: Allowed=%v Rule=%q, want denied by long", d.Allowed, d.Rule)
	}
	if err := l.Reset(ctx, a); err != nil {
		t.Fatal(err)
	}
	if got := st.Len(); got != 0 {
		t.Fatalf("Len() = %d after Reset, want 0", got)
	}
}

// BenchmarkOneRule decides a consume of one token-bucket rule on 10,000
// existing keys through the store's bound set, as a limiter of one rule
// does: by One, the store's one specialised function (decideOne), and by
// Decide with a Call of one op, the general decide every other decision
// takes. The difference is what decideOne is kept for.
//
//	go test -run '^$' -bench OneRule -benchmem -count 8 ./store/memory
func BenchmarkOneRule(b *testing.B) {
	st := memory.New(&memory.Options{SweepInterval: -1})
	defer st.Close()
	bound := st.Bind([]store.BoundRule{{Scope: "bench/per-user@1s",
		Params: store.Params{Algorithm: store.TokenBucket, Limit: 1_000_000_000, Burst: 1_000_000_000, Window: time.Second}}})
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
		bound.One(store.Consume, time.Now().UnixMicro(), 1, 0, keys[i], 0, 0)
	}
	now := time.Now().UnixMicro()
	b.Run("one", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, _, ok := bound.One(store.Consume, now, 1, 0, keys[i%len(keys)], 0, 0); !ok {
				b.Fatal("denied")
			}
			i++
		}
	})
	b.Run("decide", func(b *testing.B) {
		i := 0
		for b.Loop() {
			c := store.Call{Mode: store.Consume, Now: now, Cost: 1, N: 1}
			c.Keys[0] = keys[i%len(keys)]
			if !bound.Decide(c).Allowed {
				b.Fatal("denied")
			}
			i++
		}
	})
}
