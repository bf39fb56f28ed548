package guard_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/faulty"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func user(id string) floodgate.Attributes { return floodgate.Attributes{"user": id} }

func okRule() floodgate.Rule {
	return floodgate.Rule{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}}
}

func must(o floodgate.Outcome, err error) floodgate.Outcome {
	if err != nil {
		panic(err)
	}
	return o
}

// guardedLimiter returns a limiter with opts over st under a guard of
// gopts, with one per-user rule of limit 10 a minute, both on one clock at
// epoch. A nil Logger in either discards.
func guardedLimiter(t testing.TB, st store.Store, opts floodgate.Options, gopts guard.Options) (*floodgate.Limiter, *guard.Store, *clocktest.Manual) {
	t.Helper()
	clock := clocktest.New(epoch)
	opts.Clock, gopts.Clock = clock, clock
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if gopts.Logger == nil {
		gopts.Logger = opts.Logger
	}
	g, err := guard.New(st, &gopts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New("remote", g, []floodgate.Rule{okRule()}, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, g, clock
}

// failingWith is a store that always fails with err.
type failingWith struct{ err error }

func (s failingWith) Apply(context.Context, *store.Batch) error { return s.err }

func TestFailurePolicy(t *testing.T) {
	const timeout = 20 * time.Millisecond
	// A generous margin: the machine running the tests may be busy.
	const margin = 500 * time.Millisecond
	for _, tt := range []struct {
		name    string
		health  faulty.Health
		policy  floodgate.FailurePolicy
		wantErr error
		// callerDeadline, when set, is the caller's own deadline: one
		// later than the limiter's timeout must not lift the timeout.
		callerDeadline time.Duration
	}{
		{"failing store, open", faulty.Failing, floodgate.FailOpen, faulty.ErrDown, 0},
		{"failing store, closed", faulty.Failing, floodgate.FailClosed, faulty.ErrDown, 0},
		{"hanging store, open", faulty.Hanging, floodgate.FailOpen, context.DeadlineExceeded, 0},
		{"hanging store, closed", faulty.Hanging, floodgate.FailClosed, context.DeadlineExceeded, 0},
		{"hanging store, later caller deadline", faulty.Hanging, floodgate.FailClosed, context.DeadlineExceeded, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := faulty.New(t, tt.health)
			l, _, _ := guardedLimiter(t, fs, floodgate.Options{FailurePolicy: tt.policy}, guard.Options{Timeout: timeout, Breaker: store.BreakerOptions{Failures: -1}})
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
			if tt.health == faulty.Hanging && elapsed < timeout {
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
			fs.Set(faulty.Healthy)
			if d := l.Allow(context.Background(), user("alice")); !d.Allowed || d.Reason != floodgate.ReasonNone || d.Remaining != 9 {
				t.Errorf("after recovery: %+v, want admitted with 9 left", d)
			}
		})
	}
}

func TestCallerCancellationDoesNotTripTheBreaker(t *testing.T) {
	fs := faulty.New(t, faulty.Hanging)
	l, g, _ := guardedLimiter(t, fs, floodgate.Options{}, guard.Options{Timeout: time.Minute, Breaker: store.BreakerOptions{Failures: 2}})
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
	if got := g.State(); got != store.BreakerClosed {
		t.Errorf("breaker %v after 8 caller cancellations, want closed", got)
	}
	if got := fs.Calls(); got != 8 {
		t.Errorf("store called %d times, want 8 (the breaker must not have answered)", got)
	}
}

// When the fallback fails too, the failure policy decides, and its one log
// line names both errors (it used to be the fallback's line, with the
// store's error alone, and the policy's own line was held back).
func TestFallbackFailingToo(t *testing.T) {
	var logs syncbuf.Buffer
	fallback := faulty.New(t, faulty.Failing)
	l, _, _ := guardedLimiter(t, failingWith{errors.New("primary down")}, floodgate.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), FailurePolicy: floodgate.FailClosed}, guard.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Fallback: fallback})
	d := l.Allow(context.Background(), user("alice"))
	if d.Allowed || d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, faulty.ErrDown) {
		t.Fatalf("decision %+v: want the failure policy's denial with the fallback's error", d)
	}
	out := logs.String()
	if strings.Count(out, "floodgate:") != 1 || !strings.Contains(out, "decided by failure policy") ||
		!strings.Contains(out, "primary down") || !strings.Contains(out, faulty.ErrDown.Error()) {
		t.Errorf("want one failure-policy line naming both errors; log:\n%s", out)
	}
}

// TestNewRejectsBadOptions: options out of range are an error naming the
// option, at construction.
func TestNewRejectsBadOptions(t *testing.T) {
	st := faulty.New(t, faulty.Healthy)
	for _, tt := range []struct {
		opts guard.Options
		want string
	}{
		{guard.Options{Timeout: -time.Millisecond}, "guard: timeout must not be negative"},
		{guard.Options{Breaker: store.BreakerOptions{Ratio: 2}}, "breaker.ratio: must be between 0 and 1"},
		{guard.Options{Breaker: store.BreakerOptions{Window: time.Millisecond}}, "breaker.window: must be at least 10ms"},
		{guard.Options{Breaker: store.BreakerOptions{Cooldown: time.Second, MaxCooldown: time.Millisecond}}, "breaker.max_cooldown: must not be shorter than breaker.cooldown"},
	} {
		if _, err := guard.New(st, &tt.opts); err == nil || err.Error() != tt.want {
			t.Errorf("guard.New(%+v) = %v, want %q", tt.opts, err, tt.want)
		}
	}
	if _, err := guard.New(nil, nil); err == nil {
		t.Error("guard.New(nil) accepted a nil store")
	}
}
