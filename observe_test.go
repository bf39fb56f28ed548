package floodgate_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// TestRuleObserverTellsWhatObserverTells makes the same calls on two
// limiters of the same rules, each over a store of its own, one with an
// Observer and one with a RuleObserver, and wants the RuleObserver told,
// for each decision, of each rule of the Event's Outcome (its name, key,
// denial, the store's failure, mode, time and weight), in order. The
// limiters' shapes take every path a decision has: one plain rule (the
// lean path, with AllowKey and Allow), one rule with a limit function,
// three rules on the bound path, nine rules on the Batch path, a rule
// without a key attribute, and a store that fails.
func TestRuleObserverTellsWhatObserverTells(t *testing.T) {
	perUser := floodgate.Rule{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour, Key: []string{"user"}}
	perOrg := floodgate.Rule{Name: "per-org", Algorithm: floodgate.TokenBucket, Limit: 5, Window: time.Hour, Key: []string{"org"}}
	dark := floodgate.Rule{Name: "dark", Algorithm: floodgate.GCRA, Limit: 2, Window: time.Hour, Key: []string{"user"}, Shadow: true}
	global := floodgate.Rule{Name: "global", Algorithm: floodgate.SlidingWindow, Limit: 40, Window: time.Hour}
	limited := perUser
	limited.LimitFunc = func(context.Context, floodgate.Attributes) (int64, error) { return 2, nil }
	var many []floodgate.Rule
	for i := range 9 {
		r := perUser
		r.Name, r.Limit = fmt.Sprint("per-user-", i), int64(2+i)
		many = append(many, r)
	}
	inMemory := func(t *testing.T) store.Store {
		st := memory.New(&memory.Options{SweepInterval: -1})
		t.Cleanup(func() { st.Close() })
		return st
	}
	down := func(*testing.T) store.Store { return downStore{} }
	for _, tc := range []struct {
		name  string
		rules []floodgate.Rule
		store func(*testing.T) store.Store
	}{
		{"one plain rule", []floodgate.Rule{perUser}, inMemory},
		{"one rule with a limit function", []floodgate.Rule{limited}, inMemory},
		{"three rules", []floodgate.Rule{perUser, perOrg, dark}, inMemory},
		{"nine rules", many, inMemory},
		{"a rule without a key", []floodgate.Rule{global}, inMemory},
		{"a failing store", []floodgate.Rule{perUser, perOrg}, down},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := floodgate.NewManualClock(epoch)
			var want, got []floodgate.RuleEvent
			opts := floodgate.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)}
			byEvent, byRule := opts, opts
			byEvent.Observer = func(_ context.Context, e floodgate.Event) {
				for _, r := range e.Outcome.Rules {
					failed := e.Outcome.Reason == floodgate.ReasonStore
					want = append(want, floodgate.RuleEvent{Limiter: e.Limiter, Rule: r.Name, Key: r.Key, Mode: e.Mode, Time: e.Time,
						Denied: !failed && !r.Allowed, Failed: failed, Weight: e.Weight})
				}
			}
			byRule.RuleObserver = func(_ context.Context, e floodgate.RuleEvent) { got = append(got, e) }
			a, err := floodgate.New("obs", tc.store(t), tc.rules, &byEvent)
			if err != nil {
				t.Fatal(err)
			}
			b, err := floodgate.New("obs", tc.store(t), tc.rules, &byRule)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 12 {
				user := fmt.Sprint("u", i%2)
				attrs := floodgate.Attributes{"user": user, "org": "acme"}
				for _, l := range []*floodgate.Limiter{a, b} {
					switch i % 6 {
					case 0, 1:
						l.AllowKey(ctx, user)
					case 2:
						l.Allow(ctx, attrs)
					case 3:
						_, _ = l.Peek(ctx, attrs, 1)
					case 4:
						_, _ = l.Record(ctx, attrs, 1)
					case 5:
						_, _ = l.Decide(ctx, floodgate.ModeConsume, attrs, 2)
					}
				}
				clock.Advance(time.Second)
			}
			if len(want) == 0 {
				t.Fatal("the Observer was told of no rule")
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the RuleObserver was told\n%v\nthe Observer's Events say\n%v", got, want)
			}
		})
	}
}

// downStore is a store whose every call fails.
type downStore struct{}

func (downStore) Apply(context.Context, *store.Batch) error { return errStoreDown }
