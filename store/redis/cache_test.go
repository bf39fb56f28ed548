package redis_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redis"
)

// cachedLimiter starts a Redis and returns it with a limiter of rules on a
// store with the over-limit cache on (the default). With a clock, the store
// uses the decisions' time (UseBatchTime), so the test steps time itself.
func cachedLimiter(t *testing.T, name string, clock floodgate.Clock, rules ...floodgate.Rule) (*redistest.Server, *floodgate.Limiter) {
	t.Helper()
	srv := redistest.Start(t)
	store, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: clock != nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	lim, err := floodgate.New(name, store, rules, &floodgate.Options{Clock: clock, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return srv, lim
}

// TestDenyCache floods a denied key: the denials are answered locally,
// without a single script call, until a refund through the same store
// drops the cached denial.
func TestDenyCache(t *testing.T) {
	clock := floodgate.NewManualClock(time.Now())
	srv, lim := cachedLimiter(t, "cache", clock,
		floodgate.Rule{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"user"}})
	ctx := context.Background()
	x := floodgate.Attributes{"user": "x"}
	var first floodgate.Decision
	for i := range 3 {
		d := lim.Allow(ctx, x)
		if !d.Allowed {
			t.Fatalf("request %d denied", i)
		}
		if i == 0 {
			first = d
		}
	}
	clock.Advance(10 * time.Second)
	d := lim.Allow(ctx, x) // denied by Redis, now cached
	if d.Allowed || d.RetryAfter != 50*time.Second {
		t.Fatalf("4th request: %+v, want denied for 50s", d)
	}
	srv.MustDo("CONFIG", "RESETSTAT")
	for range 100 {
		clock.Advance(100 * time.Millisecond)
		d := lim.Allow(ctx, x)
		if d.Allowed || d.Rule != "user" || d.Reason != floodgate.ReasonLimit {
			t.Fatalf("flood: %+v, want denied by user", d)
		}
	}
	if d := lim.Allow(ctx, floodgate.Attributes{"user": "y"}); !d.Allowed {
		t.Fatalf("another key: %+v", d)
	}
	if calls := srv.CommandCalls(); calls["evalsha"] != 1 {
		t.Fatalf("script calls during the flood: %d, want 1 (the other key)", calls["evalsha"])
	}
	// Peeks are never answered from the cache: they report every rule's
	// true state.
	srv.MustDo("CONFIG", "RESETSTAT")
	for range 3 {
		n, err := lim.Peek(ctx, x, 2)
		if err != nil || n.Allowed {
			t.Fatalf("peek at 2: %+v, %v; want denied", n, err)
		}
		for _, r := range n.Rules() {
			want := map[string]int64{"user": 0}[r.Name]
			if r.Remaining != want {
				t.Fatalf("peek: rule %s remaining %d, want %d", r.Name, r.Remaining, want)
			}
		}
	}
	if calls := srv.CommandCalls(); calls["evalsha"] != 3 {
		t.Fatalf("script calls for 3 peeks: %d, want 3", calls["evalsha"])
	}
	d = lim.Allow(ctx, x)
	if d.Allowed || d.RetryAfter != 40*time.Second {
		t.Fatalf("cached denial: retry %v, want 40s", d.RetryAfter)
	}
	if err := lim.Refund(ctx, first.Ticket()); err != nil {
		t.Fatal(err)
	}
	if d := lim.Allow(ctx, x); !d.Allowed {
		t.Fatalf("after a refund: %+v, want admitted", d)
	}
	clock.Advance(41 * time.Second) // the window rolls
	if d := lim.Allow(ctx, x); !d.Allowed {
		t.Fatalf("next window: %+v, want admitted", d)
	}
}

// TestDenyCacheMultiRule: a decision is answered locally only when every
// one of its rules is a cached denial, and then exactly as Redis would
// answer it. per-user 1/min and per-tenant 1/h, the tenant spent by
// another user, x already cached as denied by per-user: {x, t} must not
// come back with per-user's minute (a client honouring it would be
// refused again) and per-tenant "admitted".
func TestDenyCacheMultiRule(t *testing.T) {
	clock := floodgate.NewManualClock(time.Now())
	srv, lim := cachedLimiter(t, "cache-multi", clock,
		floodgate.Rule{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"user"}},
		floodgate.Rule{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"tenant"}})
	ctx := context.Background()
	x := floodgate.Attributes{"user": "x"}
	xt := floodgate.Attributes{"user": "x", "tenant": "t"}
	if d := lim.Allow(ctx, x); !d.Allowed {
		t.Fatalf("x's unit: %+v", d)
	}
	if d := lim.Allow(ctx, x); d.Allowed || d.RetryAfter != time.Minute {
		t.Fatalf("x again: %+v, want denied for 1m (and cached)", d)
	}
	if d := lim.Allow(ctx, floodgate.Attributes{"user": "y", "tenant": "t"}); !d.Allowed {
		t.Fatalf("y spends the tenant's unit: %+v", d)
	}
	clock.Advance(time.Second)
	for range 3 {
		d := lim.Allow(ctx, xt)
		if d.Allowed || d.Rule != "per-tenant" || d.RetryAfter != time.Hour-time.Second {
			t.Fatalf("{x, t}: %+v, want denied by per-tenant for 59m59s", d)
		}
		for _, r := range d.Rules() {
			want := map[string]time.Duration{"per-user": 59 * time.Second, "per-tenant": time.Hour - time.Second}[r.Name]
			if r.Allowed || r.Remaining != 0 || r.RetryAfter != want || r.ResetAfter != want {
				t.Fatalf("{x, t}: rule %+v, want denied, 0 left, retry and reset %v", r, want)
			}
		}
	}
	// Now both rules are cached: the answer is local, and the same.
	srv.MustDo("CONFIG", "RESETSTAT")
	clock.Advance(500 * time.Millisecond)
	d := lim.Allow(ctx, xt)
	if d.Allowed || d.Rule != "per-tenant" || d.RetryAfter != time.Hour-1500*time.Millisecond {
		t.Fatalf("{x, t} from the cache: %+v, want denied by per-tenant for 59m58.5s", d)
	}
	if calls := srv.CommandCalls(); calls["evalsha"] != 0 {
		t.Fatalf("script calls with every rule cached: %d, want 0", calls["evalsha"])
	}
}

// TestDenyCacheWholeMicros: a cached denial on the wall clock reports whole
// microseconds, as every decision does.
func TestDenyCacheWholeMicros(t *testing.T) {
	srv, lim := cachedLimiter(t, "cache-micros", nil,
		floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}})
	ctx := context.Background()
	x := floodgate.Attributes{"user": "x"}
	lim.Allow(ctx, x)
	lim.Allow(ctx, x) // denied, cached
	srv.MustDo("CONFIG", "RESETSTAT")
	for range 20 {
		d := lim.Allow(ctx, x)
		if d.Allowed || d.RetryAfter%time.Microsecond != 0 || d.ResetAfter%time.Microsecond != 0 {
			t.Fatalf("cached denial: %+v, want denied with whole microseconds", d)
		}
	}
	if calls := srv.CommandCalls(); calls["evalsha"] != 0 {
		t.Fatalf("script calls: %d, want 0 (answered from the cache)", calls["evalsha"])
	}
}

// TestFallback kills Redis under a store with a memory fallback for two
// instances: decisions go on with half the limit, and return to Redis once
// it is back.
func TestFallback(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr,
		Fallback: &redis.Fallback{Instances: 2, Retry: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim, err := floodgate.New("fb", store, []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Hour, Key: []string{"user"}}},
		&floodgate.Options{FailurePolicy: floodgate.FailClosed, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	x := floodgate.Attributes{"user": "x"}
	srv.Kill()
	for i := range 7 {
		d := lim.Allow(ctx, x)
		if d.Reason == floodgate.ReasonStore || d.Allowed != (i < 5) {
			t.Fatalf("request %d on the fallback: allowed=%v reason=%v, want allowed=%v", i, d.Allowed, d.Reason, i < 5)
		}
	}
	srv.Restart()
	// A fresh key shows who answers: Redis leaves 9 of 10, the fallback 4
	// of 5.
	start := time.Now()
	for i := 0; ; i++ {
		d := lim.Allow(ctx, floodgate.Attributes{"user": fmt.Sprint("y", i)})
		if d.Remaining == 9 {
			break
		}
		if time.Since(start) > time.Second {
			t.Fatalf("decisions did not return to Redis within 1s: %+v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 10 { // Redis holds x's full limit again
		if d := lim.Allow(ctx, x); !d.Allowed || d.Reason != floodgate.ReasonNone {
			t.Fatalf("request %d back on Redis: %+v\nkeys: %q", i, d, srv.MustDo("KEYS", "*"))
		}
	}
}
