package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/faulty"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/memory"
)

func TestBreakerOpensAndRecovers(t *testing.T) {
	const cooldown = 10 * time.Second
	ctx := context.Background()
	st := faulty.New(t, faulty.Failing)
	var logs syncbuf.Buffer
	l, g, clock := guardedLimiter(t, st, floodgate.Options{FailurePolicy: floodgate.FailClosed, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, guard.Options{Breaker: store.BreakerOptions{Failures: 3, Cooldown: cooldown}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	for i := range 3 {
		if got := g.State(); got != store.BreakerClosed {
			t.Fatalf("breaker %v after %d failures, want closed", got, i)
		}
		d := l.Allow(ctx, user("alice"))
		if d.Allowed || !errors.Is(d.Err, faulty.ErrDown) {
			t.Fatalf("failure %d: Allowed=%v Err=%v, want a fail-closed store error", i+1, d.Allowed, d.Err)
		}
	}
	if got := g.State(); got != store.BreakerOpen {
		t.Fatalf("breaker %v after 3 consecutive failures, want open", got)
	}

	// Open: answered by the policy at once, without calling the store.
	for range 20 {
		d := l.Allow(ctx, user("alice"))
		if d.Allowed || d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, store.ErrBreakerOpen) {
			t.Fatalf("with the breaker open: Allowed=%v Reason=%v Err=%v, want denied, store, ErrBreakerOpen", d.Allowed, d.Reason, d.Err)
		}
	}
	if got := st.Calls(); got != 3 {
		t.Errorf("store called %d times, want 3 (none while open)", got)
	}
	// A fail-closed answer says when the breaker will let a probe through.
	clock.Advance(4 * time.Second)
	if d := l.Allow(ctx, user("alice")); d.RetryAfter != 6*time.Second {
		t.Errorf("RetryAfter with 6s of cooldown left = %v, want 6s", d.RetryAfter)
	}

	// The store recovers, but the breaker holds until the cooldown ends.
	st.Set(faulty.Healthy)
	clock.Advance(6*time.Second - time.Microsecond)
	if d := l.Allow(ctx, user("alice")); !errors.Is(d.Err, store.ErrBreakerOpen) {
		t.Errorf("1µs before the cooldown ends: Err=%v, want ErrBreakerOpen", d.Err)
	}
	if got := st.Calls(); got != 3 {
		t.Errorf("store called %d times before the cooldown ended, want 3", got)
	}

	// The cooldown is over: one probe goes through, succeeds and closes
	// the breaker.
	clock.Advance(time.Microsecond)
	d := l.Allow(ctx, user("alice"))
	if !d.Allowed || d.Reason != floodgate.ReasonNone || d.Err != nil || d.Remaining != 9 {
		t.Errorf("probe decision: %+v, want admitted by the rules with 9 left", d)
	}
	if got := g.State(); got != store.BreakerClosed {
		t.Errorf("breaker %v after a successful probe, want closed", got)
	}
	for _, want := range []string{"store circuit breaker opened", "store circuit breaker closed"} {
		if got := strings.Count(logs.String(), want); got != 1 {
			t.Errorf("%q logged %d times, want once; log:\n%s", want, got, logs.String())
		}
	}
	for range 5 {
		l.Allow(ctx, user("alice"))
	}
	if got := st.Calls(); got != 3+1+5 {
		t.Errorf("store called %d times, want %d (every decision once closed)", got, 3+1+5)
	}
}

func TestBreakerFailedProbeReopens(t *testing.T) {
	const cooldown = 2 * time.Second
	ctx := context.Background()
	st := faulty.New(t, faulty.Failing)
	l, g, clock := guardedLimiter(t, st, floodgate.Options{}, guard.Options{Breaker: store.BreakerOptions{Failures: 1, Cooldown: cooldown}})
	if d := l.Allow(ctx, user("alice")); !d.Allowed || !errors.Is(d.Err, faulty.ErrDown) {
		t.Fatalf("first failure: Allowed=%v Err=%v, want fail-open with the store error", d.Allowed, d.Err)
	}
	if got := g.State(); got != store.BreakerOpen {
		t.Fatalf("breaker %v, want open", got)
	}
	clock.Advance(cooldown)
	l.Allow(ctx, user("alice")) // the probe, which fails
	if got := st.Calls(); got != 2 {
		t.Fatalf("store called %d times, want 2 (one failure, one probe)", got)
	}
	if got := g.State(); got != store.BreakerOpen {
		t.Fatalf("breaker %v after a failed probe, want open again", got)
	}
	// Twice the cooldown from the failed probe: probes come at growing
	// intervals while the store stays down.
	clock.Advance(2*cooldown - time.Microsecond)
	l.Allow(ctx, user("alice"))
	if got := st.Calls(); got != 2 {
		t.Errorf("store called %d times within the second, doubled, cooldown, want 2", got)
	}
	st.Set(faulty.Healthy)
	clock.Advance(time.Microsecond)
	if d := l.Allow(ctx, user("alice")); d.Reason != floodgate.ReasonNone {
		t.Errorf("second probe: Reason=%v Err=%v, want decided by the rules", d.Reason, d.Err)
	}
	if got := g.State(); got != store.BreakerClosed {
		t.Errorf("breaker %v after a successful probe, want closed", got)
	}
}

// TestBreakerJudgesTheShareOfFailures: failures scattered among successes,
// as in a slow moment under load, leave the breaker closed however many
// there are; an outage, where most calls fail, opens it once the window
// holds Failures of them; failures older than the window are forgotten.
func TestBreakerJudgesTheShareOfFailures(t *testing.T) {
	ctx := context.Background()
	st := faulty.New(t, faulty.Healthy)
	l, g, clock := guardedLimiter(t, st, floodgate.Options{}, guard.Options{Breaker: store.BreakerOptions{Failures: 3, Window: time.Second, Cooldown: time.Second}})
	// A slow moment: 40 failures among 60 successes in one second, never
	// half of the calls so far.
	for i := range 100 {
		st.Set(faulty.Healthy)
		if i%5 == 2 || i%5 == 3 {
			st.Set(faulty.Failing)
		}
		l.Allow(ctx, user("alice"))
		clock.Advance(10 * time.Millisecond)
	}
	if got := g.State(); got != store.BreakerClosed {
		t.Fatalf("breaker %v after 40%% of a second's calls failed, want closed", got)
	}
	// Two failures and a second's quiet: not enough, and then forgotten.
	st.Set(faulty.Failing)
	l.Allow(ctx, user("alice"))
	l.Allow(ctx, user("alice"))
	clock.Advance(1100 * time.Millisecond)
	l.Allow(ctx, user("alice"))
	l.Allow(ctx, user("alice"))
	if got := g.State(); got != store.BreakerClosed {
		t.Fatalf("breaker %v after 2 failures, a quiet second and 2 more, want closed", got)
	}
	// The outage goes on: the third failure in the window opens it.
	l.Allow(ctx, user("alice"))
	if got := g.State(); got != store.BreakerOpen {
		t.Errorf("breaker %v after 3 failures of 3 calls, want open", got)
	}
}

func TestBreakerDisabled(t *testing.T) {
	st := faulty.New(t, faulty.Failing)
	l, g, _ := guardedLimiter(t, st, floodgate.Options{}, guard.Options{Breaker: store.BreakerOptions{Failures: -1}})
	for range 50 {
		l.Allow(context.Background(), user("alice"))
	}
	if got := g.State(); got != store.BreakerClosed {
		t.Errorf("disabled breaker is %v, want closed", got)
	}
	if got := st.Calls(); got != 50 {
		t.Errorf("store called %d times, want 50", got)
	}
}

func TestBreakerStateNames(t *testing.T) {
	for s, want := range map[store.BreakerState]string{
		store.BreakerClosed: "closed", store.BreakerOpen: "open", store.BreakerHalfOpen: "half_open",
	} {
		if got := s.String(); got != want {
			t.Errorf("BreakerState(%d).String() = %q, want %q", s, got, want)
		}
	}
}

func TestBreakerLetsOneProbeThrough(t *testing.T) {
	const cooldown = time.Second
	st := faulty.New(t, faulty.Failing)
	l, g, clock := guardedLimiter(t, st, floodgate.Options{}, guard.Options{Timeout: 50 * time.Millisecond, Breaker: store.BreakerOptions{Failures: 1, Cooldown: cooldown}})
	l.Allow(context.Background(), user("alice"))
	if got := g.State(); got != store.BreakerOpen {
		t.Fatalf("breaker %v, want open", got)
	}
	// The store now hangs, so the probe is in flight while the others ask.
	st.Set(faulty.Hanging)
	clock.Advance(cooldown)
	var wg sync.WaitGroup
	start := make(chan struct{})
	var breakerAnswers atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if d := l.Allow(context.Background(), user("alice")); errors.Is(d.Err, store.ErrBreakerOpen) {
				breakerAnswers.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := st.Calls(); got != 2 {
		t.Errorf("store called %d times, want 2 (the first failure and one probe)", got)
	}
	if got := breakerAnswers.Load(); got != 31 {
		t.Errorf("%d decisions answered by the breaker, want 31", got)
	}
	if got := g.State(); got != store.BreakerOpen {
		t.Errorf("breaker %v after the probe timed out, want open", got)
	}
}

// A probe whose caller gives up proves nothing either way: the next call must
// probe again rather than find the breaker stuck half open.
func TestBreakerCancelledProbeProbesAgain(t *testing.T) {
	const cooldown = time.Second
	st := faulty.New(t, faulty.Failing)
	l, g, clock := guardedLimiter(t, st, floodgate.Options{FailurePolicy: floodgate.FailClosed}, guard.Options{Breaker: store.BreakerOptions{Failures: 1, Cooldown: cooldown}})
	l.Allow(context.Background(), user("alice"))
	if got := g.State(); got != store.BreakerOpen {
		t.Fatalf("breaker %v, want open", got)
	}
	clock.Advance(cooldown)
	st.Set(faulty.Hanging)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := l.Allow(ctx, user("alice")); d.Reason != floodgate.ReasonStore {
		t.Fatalf("cancelled probe: Reason=%v, want store", d.Reason)
	}
	if got := st.Calls(); got != 2 {
		t.Fatalf("store called %d times, want 2 (one failure, one cancelled probe)", got)
	}
	st.Set(faulty.Healthy)
	if d := l.Allow(context.Background(), user("alice")); !d.Allowed || d.Reason != floodgate.ReasonNone {
		t.Fatalf("after the cancelled probe: Allowed=%v Reason=%v Err=%v, want a fresh probe decided by the rules", d.Allowed, d.Reason, d.Err)
	}
	if got := g.State(); got != store.BreakerClosed {
		t.Errorf("breaker %v, want closed after the fresh probe", got)
	}
}

// partStore fails, with a ConfinedError, every batch with a key on its lost
// part (keys starting "lost"), as a Redis Cluster store does for the keys of
// a master that is down, and is a healthy remote store for the rest.
type partStore struct {
	inner *memory.Store
	plain atomic.Bool // fail every batch with a plain error instead
}

func (s *partStore) Apply(ctx context.Context, b *store.Batch) error {
	if s.plain.Load() {
		return faulty.ErrDown
	}
	for i := range b.Ops {
		if strings.HasPrefix(b.Ops[i].Key, "lost") {
			return &store.ConfinedError{Part: "node-b", Err: faulty.ErrDown}
		}
	}
	return s.inner.Apply(ctx, b)
}

// TestConfinedFailuresLeaveTheBreakerClosed: failures the store confines to
// one part are answered by the policy, but never open the limiter's
// breaker, however many come in a row, so keys on the healthy parts stay
// decided by the rules; a probe that meets one brings no verdict.
func TestConfinedFailuresLeaveTheBreakerClosed(t *testing.T) {
	st := &partStore{inner: memory.New(&memory.Options{SweepInterval: -1})}
	defer st.inner.Close()
	l, g, clock := guardedLimiter(t, st, floodgate.Options{FailurePolicy: floodgate.FailClosed}, guard.Options{Breaker: store.BreakerOptions{Failures: 3, Cooldown: time.Second}})
	ctx := context.Background()
	for i := range 60 {
		if i%4 == 3 {
			if d := l.Allow(ctx, user(fmt.Sprint("healthy", i))); !d.Allowed || d.Reason != floodgate.ReasonNone {
				t.Fatalf("decision %d, a key on a healthy part: %+v, want decided by the rules", i, d)
			}
			continue
		}
		d := l.Allow(ctx, user(fmt.Sprint("lost", i)))
		var ce *store.ConfinedError
		if d.Allowed || d.Reason != floodgate.ReasonStore || !errors.As(d.Err, &ce) || ce.Part != "node-b" {
			t.Fatalf("decision %d, a key on the lost part: Allowed=%v Reason=%v Err=%v, want the closed policy with the confined error", i, d.Allowed, d.Reason, d.Err)
		}
		if got := g.State(); got != store.BreakerClosed {
			t.Fatalf("breaker %v after %d decisions, three in four on the lost part", got, i+1)
		}
	}

	// Plain failures open the breaker (once the healthy decisions have
	// left its window); a probe that meets a confined failure leaves it
	// to the next call to probe, which closes it.
	clock.Advance(time.Second)
	st.plain.Store(true)
	for range 3 {
		l.Allow(ctx, user("healthy"))
	}
	if got := g.State(); got != store.BreakerOpen {
		t.Fatalf("breaker %v after 3 plain failures, want open", got)
	}
	st.plain.Store(false)
	clock.Advance(time.Second)
	if d := l.Allow(ctx, user("lost-probe")); d.Allowed || d.Reason != floodgate.ReasonStore {
		t.Fatalf("a probe on the lost part: %+v", d)
	}
	if got := g.State(); got != store.BreakerOpen {
		t.Fatalf("breaker %v after a probe met a confined failure, want open", got)
	}
	if d := l.Allow(ctx, user("healthy-probe")); !d.Allowed || d.Reason != floodgate.ReasonNone {
		t.Fatalf("the next probe, on a healthy part: %+v, want decided by the rules", d)
	}
	if got := g.State(); got != store.BreakerClosed {
		t.Fatalf("breaker %v after a successful probe, want closed", got)
	}
}
