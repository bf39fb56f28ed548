package memory_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

// TestDecisionsDoNotAllocate checks the zero-allocation promise the way a
// caller meets it: an Attributes literal written in the call, existing keys,
// every decision method, with and without rule callbacks. A rule keyed on
// several attributes joins their values into a new string, its one
// allocation; a rule callback (KeyFunc, LimitFunc) is given a copy of the
// attributes it may keep, two allocations each (the map and its group). (The benchmarks show the same; this makes a regression fail
// the tests.)
func TestDecisionsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	store := memory.New(nil)
	defer store.Close()
	rules := []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 1e6, Window: time.Second, Key: []string{"user"}},
		{Name: "per-org", Algorithm: floodgate.FixedWindow, Limit: 1e9, Window: time.Hour, Key: []string{"org"}},
		{Name: "per-org-fn", Algorithm: floodgate.GCRA, Limit: 1e6, Window: time.Second,
			KeyFunc:   func(a floodgate.Attributes) string { return a["org"] },
			LimitFunc: func(_ context.Context, a floodgate.Attributes) (int64, error) { return int64(len(a)) * 1e6, nil },
		},
	}
	told := 0 // rules told to the Observers below
	composite := floodgate.Rule{Name: "per-org-user", Algorithm: floodgate.SlidingWindow, Limit: 1e9, Window: time.Hour, Key: []string{"org", "user"}}
	budget := floodgate.Rule{Name: "budget", Algorithm: floodgate.FixedWindow, Limit: 1e9, Window: time.Hour, Key: []string{"user"}, Reservable: true}
	for _, tc := range []struct {
		name  string
		rules []floodgate.Rule
		opts  *floodgate.Options
		want  float64
	}{
		{"one rule", rules[:1], nil, 0},
		{"one rule, told to an Observer", rules[:1], &floodgate.Options{Observer: countRules(&told)}, 0},
		{"three rules, one with two callbacks", rules, nil, 4},
		{"three rules, told to an Observer", rules, &floodgate.Options{Observer: countRules(&told)}, 4},
		{"a composite key", []floodgate.Rule{rules[0], composite}, nil, 1},
		// Its keys hold reservations (see below).
		{"a reservable rule", []floodgate.Rule{budget}, nil, 0},
		{"a reservable rule and two more", []floodgate.Rule{budget, rules[0], rules[1]}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := floodgate.New("alloc", store, tc.rules, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close() // the next case's limiter of this name has other rules
			users := make([]string, 64)
			for i := range users {
				users[i] = "u" + strconv.Itoa(i)
			}
			ctx := context.Background()
			i := 0
			calls := map[string]func(){
				"Allow": func() {
					if d := l.Allow(ctx, floodgate.Attributes{"user": users[i%64], "org": "acme"}); !d.Allowed {
						t.Fatalf("denied: %+v", d)
					}
				},
				"AllowN": func() { _, _ = l.AllowN(ctx, floodgate.Attributes{"user": users[i%64], "org": "acme"}, 2) },
				"Peek":   func() { _, _ = l.Peek(ctx, floodgate.Attributes{"user": users[i%64], "org": "acme"}, 1) },
				"Record": func() { _, _ = l.Record(ctx, floodgate.Attributes{"user": users[i%64], "org": "acme"}, 1) },
			}
			for _, u := range users { // every key exists before counting
				l.Allow(ctx, floodgate.Attributes{"user": u, "org": "acme"})
				if tc.rules[0].Reservable {
					for range 3 {
						if o, err := l.Reserve(ctx, floodgate.Attributes{"user": u}, 10, time.Hour); err != nil || !o.Allowed {
							t.Fatalf("Reserve: %+v, %v", o, err)
						}
					}
				}
			}
			before := told
			for name, call := range calls {
				n := testing.AllocsPerRun(200, func() { i++; call() })
				if n != tc.want {
					t.Errorf("%s: %v allocations per decision, want %v", name, n, tc.want)
				}
			}
			if tc.opts != nil && told-before < 4*200*len(tc.rules) {
				t.Errorf("the Observer was told of %d rules' decisions, want at least %d", told-before, 4*200*len(tc.rules))
			}
		})
	}
}

// countRules is an Observer that adds the rules of each decision to n.
func countRules(n *int) floodgate.Observer {
	return func(_ context.Context, e floodgate.Event) { *n += len(e.Rules()) }
}
