package floodgate_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

var errStoreDown = errors.New("test store: connection refused")

// storeHealth is what a faultyStore does with a batch.
type storeHealth int32

const (
	healthy storeHealth = iota
	failing             // returns errStoreDown at once
	hanging             // blocks until its context is done
)

// faultyStore is a remote-looking store (it does not implement
// store.InProcess, so the limiter gives it deadlines and a breaker) that
// fails or hangs on demand and otherwise keeps its state in a memory store.
type faultyStore struct {
	inner  *memory.Store
	health atomic.Int32
	calls  atomic.Int64
}

func newFaultyStore(t testing.TB, h storeHealth) *faultyStore {
	s := &faultyStore{inner: memory.New(&memory.Options{SweepInterval: -1})}
	t.Cleanup(func() { s.inner.Close() })
	s.set(h)
	return s
}

func (s *faultyStore) set(h storeHealth) { s.health.Store(int32(h)) }

func (s *faultyStore) Apply(ctx context.Context, b *store.Batch) error {
	s.calls.Add(1)
	switch storeHealth(s.health.Load()) {
	case failing:
		return errStoreDown
	case hanging:
		<-ctx.Done()
		return ctx.Err()
	}
	return s.inner.Apply(ctx, b)
}

// remoteLimiter returns a limiter over store with one per-user rule of limit
// 10 a minute, its clock at epoch.
func remoteLimiter(t testing.TB, st store.Store, opts floodgate.Options) (*floodgate.Limiter, *floodgate.ManualClock) {
	t.Helper()
	clock := floodgate.NewManualClock(epoch)
	opts.Clock = clock
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	l, err := floodgate.New("remote", st, []floodgate.Rule{okRule()}, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func TestFailurePolicy(t *testing.T) {
	const timeout = 20 * time.Millisecond
	// A generous margin: the machine running the tests may be busy.
	const margin = 500 * time.Millisecond
	for _, tt := range []struct {
		name    string
		health  storeHealth
		policy  floodgate.FailurePolicy
		wantErr error
		// callerDeadline, when set, is the caller's own deadline: one
		// later than the limiter's timeout must not lift the timeout.
		callerDeadline time.Duration
	}{
		{"failing store, open", failing, floodgate.FailOpen, errStoreDown, 0},
		{"failing store, closed", failing, floodgate.FailClosed, errStoreDown, 0},
		{"hanging store, open", hanging, floodgate.FailOpen, context.DeadlineExceeded, 0},
		{"hanging store, closed", hanging, floodgate.FailClosed, context.DeadlineExceeded, 0},
		{"hanging store, later caller deadline", hanging, floodgate.FailClosed, context.DeadlineExceeded, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFaultyStore(t, tt.health)
			l, _ := remoteLimiter(t, fs, floodgate.Options{
				FailurePolicy: tt.policy, Timeout: timeout, Breaker: store.BreakerOptions{Failures: -1},
			})
			ctx := context.Background()
			if tt.callerDeadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.callerDeadline)
				defer cancel()
			}
			start := time.Now()
			d := must(l.Decide(ctx, floodgate.ModeConsume, user("alice"), 1))
			elapsed := time.Since(start)
			if elapsed > timeout+margin {
				t.Errorf("decision took %v, want under the %v timeout plus %v", elapsed, timeout, margin)
			}
			if tt.health == hanging && elapsed < timeout {
				t.Errorf("decision took %v, before the %v deadline could pass", elapsed, timeout)
			}
			wantAllowed := tt.policy == floodgate.FailOpen
			if d.Allowed != wantAllowed || d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, tt.wantErr) {
				t.Errorf("decision Allowed=%v Reason=%v Err=%v, want %v, store, %v", d.Allowed, d.Reason, d.Err, wantAllowed, tt.wantErr)
			}
			if tt.policy == floodgate.FailClosed && d.RetryAfter < time.Second {
				t.Errorf("fail-closed RetryAfter = %v, want at least 1s", d.RetryAfter)
			}
			if d.Rule != "per-user" || d.Limit != 10 {
				t.Errorf("binding rule %q limit %d, want per-user 10", d.Rule, d.Limit)
			}
			for _, r := range d.Rules {
				if r.Allowed != wantAllowed {
					t.Errorf("rule %s Allowed=%v, want the policy's %v", r.Name, r.Allowed, wantAllowed)
				}
			}
			if d.Ticket().Valid() {
				t.Error("a decision the store never saw returned a refundable ticket")
			}
			// Once the store is back, enforcement resumes with nothing charged.
			fs.set(healthy)
			if d := l.Allow(context.Background(), user("alice")); !d.Allowed || d.Reason != floodgate.ReasonNone || d.Remaining != 9 {
				t.Errorf("after recovery: %+v, want admitted with 9 left", d)
			}
		})
	}
}

func TestCallerCancellationDoesNotTripTheBreaker(t *testing.T) {
	fs := newFaultyStore(t, hanging)
	l, _ := remoteLimiter(t, fs, floodgate.Options{
		Timeout: time.Minute, Breaker: store.BreakerOptions{Failures: 2},
	})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for range 5 {
		d := l.Allow(cancelled, user("alice"))
		if d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, context.Canceled) {
			t.Fatalf("decision with a cancelled context: Reason=%v Err=%v, want store, context.Canceled", d.Reason, d.Err)
		}
	}
	// The caller's own deadline, shorter than the limiter's, is also the
	// caller giving up.
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		start := time.Now()
		d := l.Allow(ctx, user("alice"))
		cancel()
		if elapsed := time.Since(start); elapsed > time.Second {
			t.Errorf("decision took %v with a 5ms caller deadline", elapsed)
		}
		if !errors.Is(d.Err, context.DeadlineExceeded) {
			t.Errorf("Err = %v, want context.DeadlineExceeded", d.Err)
		}
	}
	if got := l.Breaker(); got != store.BreakerClosed {
		t.Errorf("breaker %v after 8 caller cancellations, want closed", got)
	}
	if got := fs.calls.Load(); got != 8 {
		t.Errorf("store called %d times, want 8 (the breaker must not have answered)", got)
	}
}

func TestLimitFuncErrorFollowsThePolicy(t *testing.T) {
	errLookup := errors.New("plan service unavailable")
	for _, policy := range []floodgate.FailurePolicy{floodgate.FailOpen, floodgate.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			fs := newFaultyStore(t, healthy)
			clock := floodgate.NewManualClock(epoch)
			l, err := floodgate.New("plans", fs, []floodgate.Rule{
				{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute},
				{Name: "per-plan", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"},
					LimitFunc: func(context.Context, floodgate.Attributes) (int64, error) { return 0, errLookup }},
			}, &floodgate.Options{Clock: clock, FailurePolicy: policy, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			d := l.Allow(context.Background(), user("alice"))
			if want := policy == floodgate.FailOpen; d.Allowed != want || d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, errLookup) {
				t.Errorf("Allowed=%v Reason=%v Err=%v, want %v, store, %v", d.Allowed, d.Reason, d.Err, want, errLookup)
			}
			if got := fs.calls.Load(); got != 0 {
				t.Errorf("store called %d times for a decision whose limits could not be loaded", got)
			}
			// Rules without a LimitFunc still work and were charged nothing.
			if d := l.Allow(context.Background(), floodgate.Attributes{}); !d.Allowed || d.Remaining != 99 {
				t.Errorf("global rule alone: Allowed=%v Remaining=%d, want true, 99", d.Allowed, d.Remaining)
			}
		})
	}
	t.Run("out-of-range limit", func(t *testing.T) {
		fs := newFaultyStore(t, healthy)
		l, err := floodgate.New("plans", fs, []floodgate.Rule{
			{Name: "per-plan", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute,
				LimitFunc: func(context.Context, floodgate.Attributes) (int64, error) { return -3, nil }},
		}, &floodgate.Options{FailurePolicy: floodgate.FailClosed, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		d := l.Allow(context.Background(), nil)
		if d.Allowed || d.Reason != floodgate.ReasonStore || d.Err == nil || d.Err.Error() != "rule plans/per-plan: limit function returned -3" {
			t.Errorf("Allowed=%v Reason=%v Err=%v, want a fail-closed decision naming the rule", d.Allowed, d.Reason, d.Err)
		}
	})
}

func TestRefundThatCannotBeAppliedIsReported(t *testing.T) {
	fs := newFaultyStore(t, healthy)
	var logs syncbuf.Buffer
	l, _ := remoteLimiter(t, fs, floodgate.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	d := must(l.Decide(ctx, floodgate.ModeConsume, user("alice"), 1))
	fs.set(failing)
	if err := l.Refund(ctx, d.Ticket()); !errors.Is(err, errStoreDown) {
		t.Errorf("Refund on a failing store = %v, want %v", err, errStoreDown)
	}
	if !strings.Contains(logs.String(), "refund not applied") {
		t.Errorf("the failed refund was not logged; log:\n%s", logs.String())
	}
	// Stricter, never looser: the unit stays charged.
	fs.set(healthy)
	if d := peek(t, l, user("alice")); d.Remaining != 9 {
		t.Errorf("Remaining = %d after a failed refund, want 9", d.Remaining)
	}
}

// When the fallback fails too, the failure policy decides, and its one log
// line names both errors (it used to be the fallback's line, with the
// store's error alone, and the policy's own line was held back).
func TestFallbackFailingToo(t *testing.T) {
	var logs syncbuf.Buffer
	fallback := newFaultyStore(t, failing)
	l, _ := remoteLimiter(t, failingWith{errors.New("primary down")}, floodgate.Options{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Fallback: fallback, FailurePolicy: floodgate.FailClosed,
	})
	d := l.Allow(context.Background(), user("alice"))
	if d.Allowed || d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, errStoreDown) {
		t.Fatalf("decision %+v: want the failure policy's denial with the fallback's error", d)
	}
	out := logs.String()
	if strings.Count(out, "floodgate:") != 1 || !strings.Contains(out, "decided by failure policy") ||
		!strings.Contains(out, "primary down") || !strings.Contains(out, errStoreDown.Error()) {
		t.Errorf("want one failure-policy line naming both errors; log:\n%s", out)
	}
}

// failingWith is a remote-looking store that always fails with err.
type failingWith struct{ err error }

func (s failingWith) Apply(context.Context, *store.Batch) error { return s.err }

func TestFailureLoggingIsRateLimited(t *testing.T) {
	fs := newFaultyStore(t, failing)
	var logs syncbuf.Buffer
	l, clock := remoteLimiter(t, fs, floodgate.Options{
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Breaker: store.BreakerOptions{Failures: -1},
	})
	for range 100 {
		l.Allow(context.Background(), user("alice"))
	}
	if got := strings.Count(logs.String(), "decided by failure policy"); got != 1 {
		t.Errorf("100 failures within a second logged %d lines, want 1", got)
	}
	clock.Advance(time.Second)
	l.Allow(context.Background(), user("alice"))
	out := logs.String()
	if got := strings.Count(out, "decided by failure policy"); got != 2 {
		t.Errorf("a failure a second later: %d lines in all, want 2", got)
	}
	if !strings.Contains(out, "suppressed=99") {
		t.Errorf("the second line does not count the 99 held back; log:\n%s", out)
	}
}
