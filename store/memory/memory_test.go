package memory_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store/memory"
)

var floodEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// floodLimiter returns a limiter over store with the given rules and a
// manual clock standing at floodEpoch.
func floodLimiter(t testing.TB, store *memory.Store, rules ...floodgate.Rule) (*floodgate.Limiter, *clocktest.Manual) {
	t.Helper()
	clock := clocktest.New(floodEpoch)
	l, err := floodgate.New("flood", store, rules, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

// perIP is a rule keyed on the "ip" attribute.
func perIP(alg floodgate.Algorithm, limit int64, window time.Duration) floodgate.Rule {
	return floodgate.Rule{Name: "per-ip", Algorithm: alg, Limit: limit, Window: window, Key: []string{"ip"}}
}

func ip(s string) floodgate.Attributes { return floodgate.Attributes{"ip": s} }

// TestFloodDistinctKeys sends a flood of distinct keys (as from random
// source addresses) at a store capped at maxKeys, with a few hot keys at
// their limit interleaved, and checks that the cap holds, the heap stays
// bounded, and the hot keys are never forgotten.
//
// Without the race detector it sends 10,000,000 keys at a 100,000-key cap;
// with it (or with -short), 500,000 at 10,000.
func TestFloodDistinctKeys(t *testing.T) {
	keys, maxKeys := 10_000_000, 100_000
	if raceEnabled || testing.Short() {
		keys, maxKeys = 500_000, 10_000
	}
	const (
		hotKeys  = 16
		hotEvery = 1000 // flood keys between two rounds of hot-key requests
		limit    = 3
		// bytesPerKey bounds the heap one held key may cost. A key costs
		// one slot of its shard's entry slice (about 130 bytes: the key
		// strings' headers, the algorithm state and flags), one slot of
		// the shard's index map (the key and an int32, with the map's
		// spare capacity, under 100 bytes), and its key string (16 bytes
		// here). 1 KiB leaves room for map growth and allocator slack,
		// yet an unbounded store would need 10-100 times the bound.
		bytesPerKey = 1024
	)
	ctx := context.Background()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)

	store := memory.New(&memory.Options{MaxKeys: maxKeys, SweepInterval: -1})
	defer store.Close()
	// An hour-long window on a clock that never moves: no key expires, so
	// only eviction can keep the store within its cap.
	l, _ := floodLimiter(t, store, perIP(floodgate.FixedWindow, limit, time.Hour))

	hot := make([]floodgate.Attributes, hotKeys)
	for i := range hot {
		hot[i] = ip(fmt.Sprintf("hot-%d", i))
		for range limit {
			if d := l.Allow(ctx, hot[i]); !d.Allowed {
				t.Fatalf("hot key %d denied before its limit", i)
			}
		}
	}
	checkHot := func(at int) {
		for i, a := range hot {
			if d := l.Allow(ctx, a); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Hour {
				t.Fatalf("after %d flood keys, hot key %d: Allowed=%v Remaining=%d RetryAfter=%v; want false, 0, 1h (its counter was evicted)",
					at, i, d.Allowed, d.Remaining, d.RetryAfter)
			}
		}
	}

	attrs := ip("")
	buf := make([]byte, 0, 32)
	for i := range keys {
		buf = strconv.AppendInt(append(buf[:0], "flood-"...), int64(i), 10)
		attrs["ip"] = string(buf)
		if d := l.Allow(ctx, attrs); !d.Allowed || d.Remaining != limit-1 {
			t.Fatalf("flood key %d: Allowed=%v Remaining=%d, want a fresh key's true, %d", i, d.Allowed, d.Remaining, limit-1)
		}
		if i%hotEvery == 0 {
			checkHot(i)
		}
		if i%(keys/10) == 0 {
			if n := store.Len(); n > maxKeys {
				t.Fatalf("after %d flood keys the store holds %d keys, over its cap of %d", i, n, maxKeys)
			}
		}
	}
	checkHot(keys)
	if n := store.Len(); n > maxKeys || n < maxKeys/2 {
		t.Errorf("the store holds %d keys after the flood, want at most the cap %d (and most of it in use)", n, maxKeys)
	}

	runtime.GC()
	runtime.ReadMemStats(&after)
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d keys at a cap of %d: heap grew %.1f MB (%d bytes per held key)",
		keys, maxKeys, float64(growth)/1e6, growth/int64(maxKeys))
	if bound := int64(maxKeys) * bytesPerKey; growth > bound {
		t.Errorf("heap grew by %d bytes, over the bound of %d (%d keys × %d bytes)", growth, bound, maxKeys, bytesPerKey)
	}
	runtime.KeepAlive(l)
}

func TestMaxKeysIsExact(t *testing.T) {
	for _, tt := range []struct{ maxKeys, shards int }{
		{1, 0}, {3, 0}, {100, 0}, {1000, 7}, {1500, 64}, {5, 64},
	} {
		t.Run(fmt.Sprintf("%d keys %d shards", tt.maxKeys, tt.shards), func(t *testing.T) {
			store := memory.New(&memory.Options{MaxKeys: tt.maxKeys, Shards: tt.shards, SweepInterval: -1})
			defer store.Close()
			l, _ := floodLimiter(t, store, perIP(floodgate.FixedWindow, 1, time.Hour))
			for i := range 20 * tt.maxKeys {
				l.Allow(context.Background(), ip(strconv.Itoa(i)))
			}
			if n := store.Len(); n != tt.maxKeys {
				t.Errorf("Len() = %d after %d distinct keys, want the cap %d", n, 20*tt.maxKeys, tt.maxKeys)
			}
		})
	}
}

func TestUnknownKeysThatChargeNothingAreNotStored(t *testing.T) {
	store := memory.New(&memory.Options{SweepInterval: -1})
	defer store.Close()
	l, _ := floodLimiter(t, store, perIP(floodgate.FixedWindow, 5, time.Minute))
	ctx := context.Background()
	for i := range 1000 {
		if _, err := l.AllowN(ctx, ip(strconv.Itoa(i)), 0); err != nil {
			t.Fatal(err)
		}
		if d, _ := l.AllowN(ctx, ip(strconv.Itoa(i)), 6); !d.Never {
			t.Fatalf("cost 6 of 5: Never=%v, want true", d.Never)
		}
	}
	if n := store.Len(); n != 0 {
		t.Errorf("peeks and impossible costs at unknown keys left %d keys, want 0", n)
	}
}

func TestSweeperReclaimsExpiredKeys(t *testing.T) {
	for _, shards := range []int{1, 64} {
		t.Run(fmt.Sprint(shards, "shards"), func(t *testing.T) { testSweeperReclaims(t, shards) })
	}
}

// testSweeperReclaims checks that the keys of shards that see no more
// traffic are reclaimed too: the sweeper's now is the latest time any shard
// has seen.
func testSweeperReclaims(t *testing.T, shards int) {
	store := memory.New(&memory.Options{Shards: shards, SweepInterval: 2 * time.Millisecond})
	defer store.Close()
	l, clock := floodLimiter(t, store, perIP(floodgate.FixedWindow, 5, time.Second))
	ctx := context.Background()
	for i := range 100 {
		l.Allow(ctx, ip(strconv.Itoa(i)))
	}
	if n := store.Len(); n != 100 {
		t.Fatalf("Len() = %d, want 100", n)
	}
	clock.Advance(2 * time.Second) // the windows have ended a second ago
	l.Allow(ctx, ip("late"))       // the only key whose window is still open
	deadline := time.Now().Add(5 * time.Second)
	for store.Len() != 1 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if n := store.Len(); n != 1 {
		t.Fatalf("Len() = %d after the windows closed, want 1 (the sweeper did not reclaim the expired keys)", n)
	}
	if d := l.Allow(ctx, ip("late")); d.Remaining != 3 {
		t.Errorf("the live key lost its count: Remaining = %d, want 3", d.Remaining)
	}
	if d := l.Allow(ctx, ip("0")); d.Remaining != 4 {
		t.Errorf("a reclaimed key came back with Remaining = %d, want a fresh 4", d.Remaining)
	}
}

func TestCloseStopsTheSweeper(t *testing.T) {
	store := memory.New(&memory.Options{SweepInterval: time.Millisecond})
	// A goroutine that has not run yet shows in a stack dump as New's
	// go-statement wrapper, not as the sweeper: wait for it to start.
	start := time.Now().Add(5 * time.Second)
	for sweepers(store) != 1 && time.Now().Before(start) {
		time.Sleep(time.Millisecond)
	}
	if got := sweepers(store); got != 1 {
		t.Fatalf("%d sweeper goroutines of the store after New, want 1", got)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Close waits for the sweeper to signal it is done; its goroutine may
	// take a moment more to exit.
	deadline := time.Now().Add(5 * time.Second)
	for sweepers(store) != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := sweepers(store); got != 0 {
		t.Errorf("%d sweeper goroutines of the store after Close, want 0", got)
	}
	// A closed store keeps answering.
	l, _ := floodLimiter(t, store, perIP(floodgate.TokenBucket, 1, time.Minute))
	if d := l.Allow(context.Background(), ip("a")); !d.Allowed {
		t.Error("a closed store denied a fresh key")
	}
	// With the sweeper disabled there is nothing to stop.
	quiet := memory.New(&memory.Options{SweepInterval: -1})
	time.Sleep(10 * time.Millisecond)
	if got := sweepers(quiet); got != 0 {
		t.Errorf("a store without a sweeper started %d", got)
	}
	quiet.Close()
}

// sweepers counts the goroutines running s's sweeper: a stack dump names
// the receiver of memory.(*Store).sweeper by its address. (Other tests'
// stores may still be stopping theirs.)
func sweepers(s *memory.Store) int {
	call := fmt.Sprintf("memory.(*Store).sweeper(%p", s)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), call)
		}
		buf = make([]byte, 2*len(buf))
	}
}

func TestRefundOfAnEvictedKey(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Concurrency} {
		t.Run(alg.String(), func(t *testing.T) {
			const maxKeys = 64
			store := memory.New(&memory.Options{MaxKeys: maxKeys, Shards: 1, SweepInterval: -1})
			defer store.Close()
			rule := perIP(alg, 5, time.Hour)
			if alg == floodgate.FixedWindow {
				rule.Align = floodgate.AlignClock // a recreated key shares the evicted key's window
			}
			l, _ := floodLimiter(t, store, rule)
			taken, _ := l.Decide(ctx, floodgate.ModeConsume, ip("victim"), 3)
			tk := taken.Ticket()
			for i := range 10 * maxKeys {
				l.Allow(ctx, ip(strconv.Itoa(i)))
			}
			if d := l.Allow(ctx, ip("victim")); d.Remaining != 4 {
				t.Fatalf("victim was not evicted (Remaining = %d, want a fresh key's 4)", d.Remaining)
			}
			if err := l.Refund(ctx, tk); err != nil {
				t.Errorf("refund of an evicted key's ticket = %v, want nil", err)
			}
			// The refund cannot give back more than the recreated key holds.
			if d, _ := l.AllowN(ctx, ip("victim"), 0); d.Remaining > 5 {
				t.Errorf("after the refund Remaining = %d, over the limit 5", d.Remaining)
			}
			if n := store.Len(); n > maxKeys {
				t.Errorf("Len() = %d, over the cap %d", n, maxKeys)
			}
		})
	}
	t.Run("key gone entirely", func(t *testing.T) {
		store := memory.New(&memory.Options{MaxKeys: 8, Shards: 1, SweepInterval: -1})
		defer store.Close()
		l, _ := floodLimiter(t, store, perIP(floodgate.FixedWindow, 5, time.Hour))
		taken := must(l.Decide(ctx, floodgate.ModeConsume, ip("victim"), 1))
		for i := range 80 {
			l.Allow(ctx, ip(strconv.Itoa(i)))
		}
		n := store.Len()
		if err := l.Refund(ctx, taken.Ticket()); err != nil {
			t.Errorf("refund = %v, want nil", err)
		}
		if got := store.Len(); got != n {
			t.Errorf("a refund of an absent key changed Len() from %d to %d", n, got)
		}
	})
}

// TestPeeksOfUnknownKeysEvictNothing fills a store to its key cap, then
// peeks at many keys it does not hold, with one rule and with two: a peek
// never writes, so it must neither add a key nor push a held one out.
func TestPeeksOfUnknownKeysEvictNothing(t *testing.T) {
	ctx := context.Background()
	for _, rules := range [][]floodgate.Rule{
		{perIP(floodgate.FixedWindow, 1, time.Hour)},
		{perIP(floodgate.FixedWindow, 1, time.Hour), {Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 1, Window: time.Hour, Key: []string{"user"}}},
	} {
		t.Run(strconv.Itoa(len(rules))+"rules", func(t *testing.T) {
			const maxKeys = 64
			store := memory.New(&memory.Options{MaxKeys: maxKeys, Shards: 1, SweepInterval: -1})
			defer store.Close()
			l, _ := floodLimiter(t, store, rules...)
			held := func(i int) floodgate.Attributes {
				return floodgate.Attributes{"ip": "held" + strconv.Itoa(i), "user": "u" + strconv.Itoa(i)}
			}
			for i := range maxKeys / len(rules) {
				if d := l.Allow(ctx, held(i)); !d.Allowed {
					t.Fatalf("held key %d: first decision denied", i)
				}
			}
			before := store.Len()
			for i := range 10 * maxKeys {
				if d, _ := l.Peek(ctx, floodgate.Attributes{"ip": "new" + strconv.Itoa(i), "user": "n" + strconv.Itoa(i)}, 1); !d.Allowed {
					t.Fatalf("peek of unknown key %d denied: %+v", i, d)
				}
			}
			if got := store.Len(); got != before {
				t.Errorf("keys held after the peeks: %d, want %d", got, before)
			}
			for i := range maxKeys / len(rules) {
				if d, _ := l.Peek(ctx, held(i), 1); d.Allowed {
					t.Fatalf("held key %d was evicted by peeks: it admits again", i)
				}
			}
		})
	}
}

// must is the outcome of a Decide call that cannot fail.
func must(o floodgate.Outcome, err error) floodgate.Outcome {
	if err != nil {
		panic(err)
	}
	return o
}

// TestWindowOutlivesLaterUncharged: decisions may reach the store out of
// their time order (each carries its limiter's clock reading). A first-hit
// window that is full must still refuse a decision timed inside it after a
// later-timed decision that charged nothing (another rule denied) has
// seen it expire. That decision used to forget the window, and the
// earlier-timed one then opened a new window and was admitted: 21 of 20
// in one window.
func TestWindowOutlivesLaterUncharged(t *testing.T) {
	s := memory.New(&memory.Options{SweepInterval: -1})
	defer s.Close()
	clock := clocktest.New(floodEpoch)
	lim, err := floodgate.New("order", s, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 20, Window: 250 * time.Millisecond, Key: []string{"user"}},
		{Name: "per-org", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"org"}},
	}, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d := lim.Allow(ctx, floodgate.Attributes{"org": "acme"}); !d.Allowed {
		t.Fatal("the org's one unit was refused")
	}
	for i := range 20 {
		if d := lim.Allow(ctx, floodgate.Attributes{"user": "u1"}); !d.Allowed {
			t.Fatalf("consume %d of 20 refused", i+1)
		}
	}
	clock.Advance(251 * time.Millisecond)
	if d := lim.Allow(ctx, floodgate.Attributes{"user": "u1", "org": "acme"}); d.Allowed {
		t.Fatal("the org's second unit was admitted")
	}
	clock.Advance(-2 * time.Millisecond) // a decision timed at +249 ms arrives late
	if d := lim.Allow(ctx, floodgate.Attributes{"user": "u1"}); d.Allowed {
		t.Fatal("a 21st unit was admitted in the first window")
	}
}

// TestSweeperSparesLateDecisions: the sweeper does not reclaim a window
// that has just ended while a decision timed inside it may still arrive.
// It used to reclaim it at once, and such a decision opened the window
// again and was admitted over its limit.
func TestSweeperSparesLateDecisions(t *testing.T) {
	s := memory.New(&memory.Options{SweepInterval: time.Millisecond})
	defer s.Close()
	l, clock := floodLimiter(t, s, floodgate.Rule{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 20,
		Window: 250 * time.Millisecond, Align: floodgate.AlignClock, Key: []string{"ip"}})
	ctx := context.Background()
	clock.Set(floodEpoch.Truncate(250 * time.Millisecond).Add(time.Millisecond))
	for range 20 {
		if d := l.Allow(ctx, ip("hot")); !d.Allowed {
			t.Fatal("the window's 20 units were not all admitted")
		}
	}
	clock.Advance(250 * time.Millisecond) // the next window
	l.Allow(ctx, ip("other"))
	time.Sleep(50 * time.Millisecond) // many sweeps
	clock.Advance(-2 * time.Millisecond)
	if d := l.Allow(ctx, ip("hot")); d.Allowed {
		t.Fatal("a decision timed in the full window, arriving after the sweep, was admitted")
	}
}

// TestHoldsKeepTheirKey: a key whose count is 0 but which holds a
// reservation is a key in use. The sweeper leaves it until its window
// ends, and a flood of distinct keys does not push it out while it is
// used; its hold is then still there to settle.
func TestHoldsKeepTheirKey(t *testing.T) {
	const maxKeys = 64
	s := memory.New(&memory.Options{MaxKeys: maxKeys, Shards: 1, SweepInterval: time.Millisecond})
	defer s.Close()
	budget := perIP(floodgate.FixedWindow, 100, time.Minute)
	budget.Reservable = true
	l, clock := floodLimiter(t, s, budget)
	ctx := context.Background()
	o, err := l.Reserve(ctx, ip("held"), 60, 30*time.Second)
	if err != nil || !o.Allowed {
		t.Fatalf("Reserve = %+v, %v", o, err)
	}
	clock.Advance(20 * time.Second)
	for i := range 10 * maxKeys {
		l.Allow(ctx, ip(strconv.Itoa(i)))
		if i%16 == 0 {
			l.Peek(ctx, ip("held"), 1) // the key is in use
		}
	}
	time.Sleep(20 * time.Millisecond) // many sweeps
	if d, _ := l.Peek(ctx, ip("held"), 1); d.Remaining != 40 {
		t.Fatalf("a key holding 60 units: %d left, want 40 (the key was forgotten)", d.Remaining)
	}
	if st, err := l.Settle(ctx, o.Ticket(), 10); err != nil || st != floodgate.Settled {
		t.Fatalf("Settle = %v, %v; want settled (the hold was there)", st, err)
	}
	// Released, it holds nothing and counts 10 to its window's end.
	clock.Advance(2 * time.Minute) // past every window, and the sweeper's lateness
	l.Allow(ctx, ip("late"))
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() > 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := s.Len(); n != 1 {
		t.Fatalf("Len() = %d once every window ended, want 1", n)
	}
}
