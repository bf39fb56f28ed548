package guard_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/faulty"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/floodgate-go/floodgate/store/share"
)

// shareFallback is an instance's fallback: its share of the limits on a
// memory store of its own.
func shareFallback(t testing.TB, instances int) store.Store {
	t.Helper()
	mem := memory.New(&memory.Options{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	fb, err := share.New(mem, instances)
	if err != nil {
		t.Fatal(err)
	}
	return fb
}

// instance is a limiter and the guard of its store.
type instance struct {
	*floodgate.Limiter
	g *guard.Store
}

// waitRemaining peeks at alice's units left on every instance in turn
// (each instance's breaker probes, and hands back, on its own traffic)
// until the first, its breaker closed, says want, for up to 3 s.
func waitRemaining(t *testing.T, want int64, instances ...instance) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		for _, l := range instances[1:] {
			l.Decide(context.Background(), floodgate.ModeConsume, user("alice"), 0)
		}
		l := instances[0]
		o, err := l.Decide(context.Background(), floodgate.ModeConsume, user("alice"), 0)
		if err != nil {
			t.Fatal(err)
		}
		if l.g.State() == store.BreakerClosed && o.Reason != floodgate.ReasonStore && o.Remaining == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice has %d left (reason %v, breaker %v), want %d (the store has not counted what the fallback admitted in its window)",
				o.Remaining, o.Reason, l.g.State(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func admit(l instance, n int) (admitted int) {
	for range n {
		if l.Allow(context.Background(), user("alice")).Allowed {
			admitted++
		}
	}
	return admitted
}

// handbackLimiter is a limiter of 100 a minute per user over st, with a
// fallback holding a quarter of it, its clock at epoch.
func handbackLimiter(t *testing.T, st store.Store) (instance, *clocktest.Manual) {
	t.Helper()
	clock := clocktest.New(epoch)
	g, err := guard.New(st, &guard.Options{Clock: clock, Fallback: shareFallback(t, 4), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New("remote", g, []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"user"}},
	}, &floodgate.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return instance{l, g}, clock
}

// TestFallbackHandsBack: what the fallback admitted while the store could
// not answer is recorded into the store once it answers again, so the
// store's window counts it: 40 admitted by the store, 25 (the instance's
// share of 100) by the fallback, and the store then has 35 left, not 60.
func TestFallbackHandsBack(t *testing.T) {
	st := faulty.New(t, faulty.Healthy)
	l, clock := handbackLimiter(t, st)
	if got := admit(l, 40); got != 40 {
		t.Fatalf("the store admitted %d of 40", got)
	}
	st.Set(faulty.Failing)
	if got := admit(l, 30); got != 25 {
		t.Fatalf("the fallback admitted %d of 30, want its share, 25", got)
	}
	st.Set(faulty.Healthy)
	clock.Advance(time.Second) // past the breaker's cooldown: the next call probes
	waitRemaining(t, 100-40-25, l)
	if got := admit(l, 50); got != 35 {
		t.Errorf("after the store came back it admitted %d, want 35", got)
	}
}

// TestFallbackHandsBackOnlyItsWindow: charges of a window that has ended
// have aged out, as they would have in the store, and are not handed back:
// of 10 units in the fallback's first minute and 5 in its second, the
// store learns 5; a minute later, nothing.
func TestFallbackHandsBackOnlyItsWindow(t *testing.T) {
	st := faulty.New(t, faulty.Failing)
	l, clock := handbackLimiter(t, st)
	if got := admit(l, 10); got != 10 {
		t.Fatalf("the fallback admitted %d of 10", got)
	}
	clock.Advance(time.Minute)
	if got := admit(l, 5); got != 5 {
		t.Fatalf("the fallback admitted %d of 5 in its next minute", got)
	}
	st.Set(faulty.Healthy)
	clock.Advance(time.Second) // past the breaker's cooldown
	waitRemaining(t, 95, l)

	st.Set(faulty.Failing)
	clock.Advance(2 * time.Minute) // the store's window has ended too
	admit(l, 10)
	st.Set(faulty.Healthy)
	clock.Advance(time.Minute + time.Second)
	waitRemaining(t, 100, l)
	time.Sleep(50 * time.Millisecond) // a handback would have landed
	if got := admit(l, 100); got != 100 {
		t.Errorf("the store admitted %d of its 100 after the fallback's minute had passed", got)
	}
}

// TestFallbackHandsBackOnRedis freezes a real Redis (SIGSTOP) while two
// instances, each with its own fallback (half the limit), take all they
// can: when Redis answers again the window holds what the instances
// admitted on their own, and admits nothing more. Without the handback,
// Redis knew only its own 40 and admitted 60 more: 200 in a window of 100.
func TestFallbackHandsBackOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	rule := []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"user"}}}
	var instances [2]instance
	for i := range instances {
		rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rs.Close() })
		g, err := guard.New(rs, &guard.Options{Timeout: 50 * time.Millisecond, Fallback: shareFallback(t, 2), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := floodgate.New("handback", g, rule, &floodgate.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		instances[i] = instance{l, g}
	}
	total := admit(instances[0], 40)
	if total != 40 {
		t.Fatalf("Redis admitted %d of 40", total)
	}
	srv.Pause()
	var local atomic.Int64
	var wg sync.WaitGroup
	for _, l := range instances {
		wg.Go(func() { local.Add(int64(admit(l, 60))) })
	}
	wg.Wait()
	srv.Resume()
	if got := local.Load(); got != 100 {
		t.Fatalf("the fallbacks admitted %d while Redis was frozen, want 2 × 50", got)
	}
	waitRemaining(t, 0, instances[:]...)
	waitRemaining(t, 0, instances[1], instances[0])
	after := 0
	for _, l := range instances {
		after += admit(l, 20)
	}
	if window := 40 + 100 + after; after != 0 {
		t.Errorf("the window admitted %d after Redis came back (%d in all, limit 100, one instance's share 50)", after, window)
	}
}
