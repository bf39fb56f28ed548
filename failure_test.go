package floodgate_test

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
)

var errStoreDown = faulty.ErrDown

// remoteLimiter returns a limiter over st with one per-user rule of limit
// 10 a minute, its clock at epoch.
func remoteLimiter(t testing.TB, st store.Store, opts floodgate.Options) (*floodgate.Limiter, *clocktest.Manual) {
	t.Helper()
	clock := clocktest.New(epoch)
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

func TestLimitFuncErrorFollowsThePolicy(t *testing.T) {
	errLookup := errors.New("plan service unavailable")
	for _, policy := range []floodgate.FailurePolicy{floodgate.FailOpen, floodgate.FailClosed} {
		t.Run(policy.String(), func(t *testing.T) {
			fs := faulty.New(t, faulty.Healthy)
			clock := clocktest.New(epoch)
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
			if got := fs.Calls(); got != 0 {
				t.Errorf("store called %d times for a decision whose limits could not be loaded", got)
			}
			// Rules without a LimitFunc still work and were charged nothing.
			if d := l.Allow(context.Background(), floodgate.Attributes{}); !d.Allowed || d.Remaining != 99 {
				t.Errorf("global rule alone: Allowed=%v Remaining=%d, want true, 99", d.Allowed, d.Remaining)
			}
		})
	}
	t.Run("out-of-range limit", func(t *testing.T) {
		fs := faulty.New(t, faulty.Healthy)
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
	fs := faulty.New(t, faulty.Healthy)
	var logs syncbuf.Buffer
	l, _ := remoteLimiter(t, fs, floodgate.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	d := must(l.Decide(ctx, floodgate.ModeConsume, user("alice"), 1))
	fs.Set(faulty.Failing)
	if err := l.Refund(ctx, d.Ticket()); !errors.Is(err, errStoreDown) {
		t.Errorf("Refund on a failing store = %v, want %v", err, errStoreDown)
	}
	if !strings.Contains(logs.String(), "refund not applied") {
		t.Errorf("the failed refund was not logged; log:\n%s", logs.String())
	}
	// Stricter, never looser: the unit stays charged.
	fs.Set(faulty.Healthy)
	if d := peek(t, l, user("alice")); d.Remaining != 9 {
		t.Errorf("Remaining = %d after a failed refund, want 9", d.Remaining)
	}
}

func TestFailureLoggingIsRateLimited(t *testing.T) {
	fs := faulty.New(t, faulty.Failing)
	var logs syncbuf.Buffer
	l, clock := remoteLimiter(t, fs, floodgate.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
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
