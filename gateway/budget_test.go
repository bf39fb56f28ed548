package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/store"
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func testBudgetCheck(t *testing.T, newStore newStoreFunc) {
	ny := mustLoad(t, "America/New_York")
	g := newGW(t, newStore, gwStart) // 2026-03-02 05:00 in New York
	budget := g.limiter("spend", floodgate.FailClosed, gateway.MonthlyBudget("monthly", 1000, ny, "key"))
	acme := floodgate.Attributes{"key": "acme"}

	// Checks are read-only: however many, nothing is spent.
	for range 5 {
		d, err := budget.Peek(g.ctx, acme, 400)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed || d.Remaining != 1000 {
			t.Fatalf("check: allowed=%v remaining=%d, want admitted with 1000 left", d.Allowed, d.Remaining)
		}
	}
	if _, err := budget.Record(g.ctx, acme, 990); err != nil {
		t.Fatal(err)
	}
	// March ends at midnight in New York, 04:00 UTC on April 1 (daylight
	// time): 29 days and 18 hours after 05:00 EST on March 2.
	untilApril := 29*24*time.Hour + 18*time.Hour
	d, _ := budget.Peek(g.ctx, acme, 20)
	if d.Allowed || d.RetryAfter != untilApril {
		t.Fatalf("check of 20 with 10 left: allowed=%v retry-after=%v, want denied for %v", d.Allowed, d.RetryAfter, untilApril)
	}
	d, _ = budget.Peek(g.ctx, acme, 1)
	if !d.Allowed || d.Remaining != 10 {
		t.Fatalf("check of 1: allowed=%v remaining=%d", d.Allowed, d.Remaining)
	}
	// Recording may overspend; the next check is then refused until the
	// month ends.
	if _, err := budget.Record(g.ctx, acme, 25); err != nil {
		t.Fatal(err)
	}
	d, _ = budget.Peek(g.ctx, acme, 1)
	if d.Allowed || d.Reason != floodgate.ReasonLimit || d.RetryAfter != untilApril {
		t.Fatalf("overspent: %+v", d)
	}
}

// peekFailStore fails every read-only decision (peek) and applies the rest,
// like a replica that is down for reads.
type peekFailStore struct{ inner store.Store }

func (s peekFailStore) Apply(ctx context.Context, b *store.Batch) error {
	if b.Mode == floodgate.ModePeek {
		return errStoreDown
	}
	return s.inner.Apply(ctx, b)
}

func TestBudgetReadFailure(t *testing.T) {
	for _, policy := range []floodgate.FailurePolicy{floodgate.FailClosed, floodgate.FailOpen} {
		t.Run(policy.String(), func(t *testing.T) {
			g := newGW(t, memoryStore, gwStart)
			st := peekFailStore{g.st}
			budget, err := floodgate.New("spend", st, []floodgate.Rule{gateway.DailyBudget("daily", 100, nil, "key")},
				&floodgate.Options{Clock: g.clock, FailurePolicy: policy, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			acme := floodgate.Attributes{"key": "acme"}
			if _, err := budget.Record(g.ctx, acme, 100); err != nil {
				t.Fatal(err)
			}
			d, err := budget.Peek(g.ctx, acme, 1)
			if err != nil {
				t.Fatal(err)
			}
			// The check is decided by the policy, says so, and never
			// reports the budget as unspent.
			if d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, errStoreDown) {
				t.Errorf("reason %v err %v, want a store failure", d.Reason, d.Err)
			}
			if d.Remaining != 0 {
				t.Errorf("a failed read reports %d remaining", d.Remaining)
			}
			switch policy {
			case floodgate.FailClosed:
				if d.Allowed || d.RetryAfter < time.Second {
					t.Errorf("fail-closed budget check: allowed=%v retry-after=%v", d.Allowed, d.RetryAfter)
				}
			case floodgate.FailOpen:
				if !d.Allowed {
					t.Error("fail-open budget check denied")
				}
			}
			// The spend recorded before the failure is still there.
			direct, _ := floodgate.New("spend", g.st, []floodgate.Rule{gateway.DailyBudget("daily", 100, nil, "key")},
				&floodgate.Options{Clock: g.clock})
			if d, _ := direct.Peek(g.ctx, acme, 1); d.Allowed || d.Reason != floodgate.ReasonLimit {
				t.Errorf("the spent budget reads %+v", d)
			}
		})
	}
}

func testCalendarBudgets(t *testing.T, newStore newStoreFunc) {
	ny, berlin := mustLoad(t, "America/New_York"), mustLoad(t, "Europe/Berlin")
	const day = 24 * time.Hour
	for _, tt := range []struct {
		name string
		rule floodgate.Rule
		at   time.Time
		want time.Duration // until the window holding at ends
	}{
		{"month end UTC", gateway.MonthlyBudget("b", 10, nil, "k"), time.Date(2027, 1, 31, 23, 59, 30, 0, time.UTC), 30 * time.Second},
		// 04:00 UTC on Feb 1 is still January in New York.
		{"month end New York", gateway.MonthlyBudget("b", 10, ny, "k"), time.Date(2026, 1, 31, 23, 0, 0, 0, ny), time.Hour},
		{"year end New York", gateway.MonthlyBudget("b", 10, ny, "k"), time.Date(2026, 12, 31, 23, 0, 0, 0, ny), time.Hour},
		{"February 2027", gateway.MonthlyBudget("b", 10, nil, "k"), time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), 28 * day},
		{"February 2028 (leap)", gateway.MonthlyBudget("b", 10, berlin, "k"), time.Date(2028, 2, 1, 0, 0, 0, 0, berlin), 29 * day},
		{"Feb 28 2028 rolls to the leap day", gateway.DailyBudget("b", 10, berlin, "k"), time.Date(2028, 2, 28, 18, 0, 0, 0, berlin), 6 * time.Hour},
		{"leap day", gateway.DailyBudget("b", 10, berlin, "k"), time.Date(2028, 2, 29, 12, 0, 0, 0, berlin), 12 * time.Hour},
		{"spring forward New York (23h day)", gateway.DailyBudget("b", 10, ny, "k"), time.Date(2026, 3, 8, 0, 0, 0, 0, ny), 23 * time.Hour},
		{"fall back New York (25h day)", gateway.DailyBudget("b", 10, ny, "k"), time.Date(2026, 11, 1, 0, 30, 0, 0, ny), 24*time.Hour + 30*time.Minute},
		{"spring forward Berlin (23h day)", gateway.DailyBudget("b", 10, berlin, "k"), time.Date(2026, 3, 29, 0, 0, 0, 0, berlin), 23 * time.Hour},
		{"fall back Berlin (25h day)", gateway.DailyBudget("b", 10, berlin, "k"), time.Date(2026, 10, 25, 0, 0, 0, 0, berlin), 25 * time.Hour},
		{"March New York loses an hour", gateway.MonthlyBudget("b", 10, ny, "k"), time.Date(2026, 3, 1, 0, 0, 0, 0, ny), 31*day - time.Hour},
		{"October Berlin gains an hour", gateway.MonthlyBudget("b", 10, berlin, "k"), time.Date(2026, 10, 1, 0, 0, 0, 0, berlin), 31*day + time.Hour},
		{"November New York month end", gateway.MonthlyBudget("b", 10, ny, "k"), time.Date(2026, 11, 30, 23, 59, 59, 0, ny), time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGW(t, newStore, tt.at)
			budget := g.limiter("cal", floodgate.FailClosed, tt.rule)
			k := floodgate.Attributes{"k": "tenant"}
			if _, err := budget.Record(g.ctx, k, 10); err != nil {
				t.Fatal(err)
			}
			d, _ := budget.Peek(g.ctx, k, 1)
			if d.Allowed || d.RetryAfter != tt.want || d.ResetAfter != tt.want {
				t.Fatalf("spent at %v: allowed=%v retry-after=%v reset-after=%v, want denied for %v",
					tt.at, d.Allowed, d.RetryAfter, d.ResetAfter, tt.want)
			}
			g.clock.Advance(tt.want - time.Microsecond)
			if d, _ := budget.Peek(g.ctx, k, 1); d.Allowed {
				t.Fatalf("admitted a microsecond before the window ends, at %v", g.clock.Now().In(tt.at.Location()))
			}
			g.clock.Advance(time.Microsecond)
			d, _ = budget.Peek(g.ctx, k, 10)
			if !d.Allowed || d.Remaining != 10 {
				t.Fatalf("new window at %v: allowed=%v remaining=%d, want the whole budget", g.clock.Now().In(tt.at.Location()), d.Allowed, d.Remaining)
			}
		})
	}
}

func testRollingBudget(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	budget := g.limiter("rolling", floodgate.FailClosed, gateway.RollingBudget("day", 100, 24*time.Hour, "k"))
	k := floodgate.Attributes{"k": "tenant"}
	budget.Record(g.ctx, k, 50)
	g.clock.Advance(30 * time.Minute)
	budget.Record(g.ctx, k, 50)
	// 60 buckets of 24 minutes: the first 50 leave the window 24 hours
	// after their bucket opened (10:00 is a bucket boundary).
	d, _ := budget.Peek(g.ctx, k, 1)
	if want := 23*time.Hour + 30*time.Minute; d.Allowed || d.RetryAfter != want {
		t.Fatalf("spent: allowed=%v retry-after=%v, want denied for %v", d.Allowed, d.RetryAfter, want)
	}
	g.clock.Advance(d.RetryAfter)
	if d, _ := budget.Peek(g.ctx, k, 50); !d.Allowed || d.Remaining != 50 {
		t.Fatalf("after the first spend aged out: allowed=%v remaining=%d", d.Allowed, d.Remaining)
	}
}
