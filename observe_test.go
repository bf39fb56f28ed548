package floodgate_test

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// TestObserverToldOfEachRule makes the same decisions on two limiters of
// the same rules, each over a store of its own, one with an Observer and
// one asked with Decide, and wants each Event to hold the decision and,
// for each rule of the Outcome, its part (name, key, denial, shadow, the
// store's failure), in order. The limiters' shapes take every path a
// decision has: one rule (with AllowKey and Allow), one rule with a limit
// function, three rules, nine rules (more than a store.Call holds), a
// rule without a key attribute, and a store that fails.
func TestObserverToldOfEachRule(t *testing.T) {
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
		byKey bool // the rules key on the user alone: AllowKey applies
	}{
		{"one plain rule", []floodgate.Rule{perUser}, inMemory, true},
		{"one rule with a limit function", []floodgate.Rule{limited}, inMemory, true},
		{"three rules", []floodgate.Rule{perUser, perOrg, dark}, inMemory, false},
		{"nine rules", many, inMemory, true},
		{"a rule without a key", []floodgate.Rule{global}, inMemory, true},
		{"a failing store", []floodgate.Rule{perUser, perOrg}, down, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := clocktest.New(epoch)
			var events []floodgate.Event
			opts := floodgate.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)}
			asked := opts
			opts.Observer = func(_ context.Context, e floodgate.Event) { events = append(events, e) }
			a, err := floodgate.New("obs", tc.store(t), tc.rules, &opts)
			if err != nil {
				t.Fatal(err)
			}
			b, err := floodgate.New("obs", tc.store(t), tc.rules, &asked)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for i := range 12 {
				user := fmt.Sprint("u", i%2)
				attrs := floodgate.Attributes{"user": user, "org": "acme"}
				mode, cost := floodgate.ModeConsume, int64(1)
				switch i % 6 {
				case 0, 1:
					if tc.byKey {
						a.AllowKey(ctx, user)
						attrs = floodgate.Attributes{"user": user}
					} else {
						a.Allow(ctx, attrs)
					}
				case 2:
					a.Allow(ctx, attrs)
				case 3:
					mode = floodgate.ModePeek
					_, _ = a.Peek(ctx, attrs, 1)
				case 4:
					mode = floodgate.ModeRecord
					_, _ = a.Record(ctx, attrs, 1)
				case 5:
					cost = 2
					_, _ = a.Decide(ctx, floodgate.ModeConsume, attrs, cost)
				}
				o := must(b.Decide(ctx, mode, attrs, cost))
				clock.Advance(time.Second)
				if len(events) != i+1 {
					t.Fatalf("decision %d: the Observer was told of %d decisions", i, len(events))
				}
				e := events[i]
				if e.Limiter != "obs" || e.Mode != mode || e.Cost != cost || e.Weight != 1 || !reflect.DeepEqual(e.Decision, o.Decision) {
					t.Errorf("decision %d: Event %+v, want %v of %d deciding %+v", i, e, mode, cost, o.Decision)
				}
				var want []floodgate.RuleEvent
				failed := o.Reason == floodgate.ReasonStore
				for _, r := range o.Rules {
					want = append(want, floodgate.RuleEvent{Rule: r.Name, Key: r.Key, Denied: !failed && !r.Allowed, Shadow: r.Shadow, Failed: failed})
				}
				if got := e.Rules(); !reflect.DeepEqual(got, want) && len(got)+len(want) > 0 {
					t.Errorf("decision %d: the Event's rules\n%v\nthe Outcome's\n%v", i, got, want)
				}
			}
		})
	}
}

// downStore is a store whose every call fails.
type downStore struct{}

func (downStore) Apply(context.Context, *store.Batch) error { return errStoreDown }
