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

// TestDenyCache floods a denied key: the denials are answered locally,
// without a single script call, until a refund through the same store
// drops the cached denial.
func TestDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	clock := floodgate.NewManualClock(time.Now())
	store, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	lim, err := floodgate.New("cache", store, []floodgate.Rule{
		{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"user"}},
		{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour},
	}, &floodgate.Options{Clock: clock, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
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
	// true state (global has 4 of its 1000 used: x's 3 and y's 1).
	srv.MustDo("CONFIG", "RESETSTAT")
	for range 3 {
		n, err := lim.Peek(ctx, x, 2)
		if err != nil || n.Allowed {
			t.Fatalf("peek at 2: %+v, %v; want denied", n, err)
		}
		for _, r := range n.Rules() {
			want := map[string]int64{"user": 0, "global": 996}[r.Name]
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
