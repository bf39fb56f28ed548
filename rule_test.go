package floodgate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// okRule is a valid rule that validation cases start from.
func okRule() floodgate.Rule {
	return floodgate.Rule{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Second, Key: []string{"user"}}
}

func TestNewValidation(t *testing.T) {
	mem := memory.New(&memory.Options{SweepInterval: -1})
	defer mem.Close()
	with := func(f func(r *floodgate.Rule)) []floodgate.Rule {
		r := okRule()
		f(&r)
		return []floodgate.Rule{r}
	}
	tests := []struct {
		name    string
		limiter string
		st      store.Store
		rules   []floodgate.Rule
		opts    *floodgate.Options
		// want is the whole message; wantLimiter, wantRule and wantField are
		// the ConfigError's fields.
		want                             string
		wantLimiter, wantRule, wantField string
	}{
		{
			name: "empty limiter name", limiter: "", rules: with(func(*floodgate.Rule) {}),
			want:      `floodgate: limiter "": name: must not be empty`,
			wantField: "name",
		},
		{
			name: "bad limiter name", limiter: "api v1", rules: with(func(*floodgate.Rule) {}),
			want:        `floodgate: limiter "api v1": name: may hold only letters, digits, '.', '_' and '-'`,
			wantLimiter: "api v1", wantField: "name",
		},
		{
			name: "nil store", limiter: "api", st: nilStore, rules: with(func(*floodgate.Rule) {}),
			want:        `floodgate: limiter "api": store: must not be nil`,
			wantLimiter: "api", wantField: "store",
		},
		{
			name: "no rules", limiter: "api",
			want:        `floodgate: limiter "api": rules: must hold at least one rule`,
			wantLimiter: "api", wantField: "rules",
		},
		{
			name: "unknown failure policy", limiter: "api", rules: with(func(*floodgate.Rule) {}),
			opts:        &floodgate.Options{FailurePolicy: 7},
			want:        `floodgate: limiter "api": failure_policy: unknown policy`,
			wantLimiter: "api", wantField: "failure_policy",
		},
		{
			name: "empty rule name", limiter: "api", rules: []floodgate.Rule{okRule(), {Algorithm: floodgate.GCRA, Limit: 1, Window: time.Second}},
			want:        `floodgate: limiter "api": rules[1].name: must not be empty`,
			wantLimiter: "api", wantField: "name",
		},
		{
			name: "bad rule name", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Name = "per/user" }),
			want:        `floodgate: limiter "api" rule "per/user": name: "per/user" may hold only letters, digits, '.', '_' and '-'`,
			wantLimiter: "api", wantRule: "per/user", wantField: "name",
		},
		{
			name: "duplicate rule name", limiter: "api", rules: []floodgate.Rule{okRule(), okRule()},
			want:        `floodgate: limiter "api" rule "per-user": name: duplicate rule name`,
			wantLimiter: "api", wantRule: "per-user", wantField: "name",
		},
		{
			name: "zero algorithm", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Algorithm = 0 }),
			want:        `floodgate: limiter "api" rule "per-user": algorithm: must be set (fixed_window, sliding_window, token_bucket, gcra or concurrency)`,
			wantLimiter: "api", wantRule: "per-user", wantField: "algorithm",
		},
		{
			name: "unknown algorithm", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Algorithm = 9 }),
			want:        `floodgate: limiter "api" rule "per-user": algorithm: unknown algorithm 9 (want fixed_window, sliding_window, token_bucket, gcra or concurrency)`,
			wantLimiter: "api", wantRule: "per-user", wantField: "algorithm",
		},
		{
			name: "zero limit", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Limit = 0 }),
			want:        `floodgate: limiter "api" rule "per-user": limit: must be at least 1, got 0`,
			wantLimiter: "api", wantRule: "per-user", wantField: "limit",
		},
		{
			name: "negative limit", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Limit = -5 }),
			want:        `floodgate: limiter "api" rule "per-user": limit: must be at least 1, got -5`,
			wantLimiter: "api", wantRule: "per-user", wantField: "limit",
		},
		{
			name: "huge limit", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Limit = 1 << 60 }),
			want:        `floodgate: limiter "api" rule "per-user": limit: 1152921504606846976 is too large (at most 2251799813685248)`,
			wantLimiter: "api", wantRule: "per-user", wantField: "limit",
		},
		{
			name: "bucket limit times window too large", limiter: "api",
			rules: with(func(r *floodgate.Rule) {
				r.Algorithm, r.Limit, r.Window = floodgate.TokenBucket, 1<<40, time.Hour
			}),
			want:        `floodgate: limiter "api" rule "per-user": limit: limit or burst 1099511627776 times window 1h0m0s exceeds 2^51 microsecond-units; use a shorter window or a smaller limit`,
			wantLimiter: "api", wantRule: "per-user", wantField: "limit",
		},
		{
			name: "zero window", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Window = 0 }),
			want:        `floodgate: limiter "api" rule "per-user": window: must be at least 1ms, got 0s`,
			wantLimiter: "api", wantRule: "per-user", wantField: "window",
		},
		{
			name: "window under 1ms", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Window = 999 * time.Microsecond }),
			want:        `floodgate: limiter "api" rule "per-user": window: must be at least 1ms, got 999µs`,
			wantLimiter: "api", wantRule: "per-user", wantField: "window",
		},
		{
			name: "window not whole microseconds", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Window = time.Millisecond + 1 }),
			want:        `floodgate: limiter "api" rule "per-user": window: must be a whole number of microseconds, got 1.000001ms`,
			wantLimiter: "api", wantRule: "per-user", wantField: "window",
		},
		{
			name: "burst on fixed window", limiter: "api", rules: with(func(r *floodgate.Rule) { r.Burst = 20 }),
			want:        `floodgate: limiter "api" rule "per-user": burst: applies to token_bucket and gcra only, not fixed_window`,
			wantLimiter: "api", wantRule: "per-user", wantField: "burst",
		},
		{
			name: "burst on concurrency", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Burst = floodgate.Concurrency, 2 }),
			want:        `floodgate: limiter "api" rule "per-user": burst: applies to token_bucket and gcra only, not concurrency`,
			wantLimiter: "api", wantRule: "per-user", wantField: "burst",
		},
		{
			name: "negative burst", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Burst = floodgate.GCRA, -1 }),
			want:        `floodgate: limiter "api" rule "per-user": burst: must not be negative, got -1`,
			wantLimiter: "api", wantRule: "per-user", wantField: "burst",
		},
		{
			name: "grant on gcra", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Grant = floodgate.GCRA, true }),
			want:        `floodgate: limiter "api" rule "per-user": grant: applies to fixed_window and token_bucket only, not gcra`,
			wantLimiter: "api", wantRule: "per-user", wantField: "grant",
		},
		{
			name: "grant on sliding window", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Grant = floodgate.SlidingWindow, true }),
			want:        `floodgate: limiter "api" rule "per-user": grant: applies to fixed_window and token_bucket only, not sliding_window`,
			wantLimiter: "api", wantRule: "per-user", wantField: "grant",
		},
		{
			name: "reservable token bucket", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Reservable = floodgate.TokenBucket, true }),
			want:        `floodgate: limiter "api" rule "per-user": reservable: applies to fixed_window only, not token_bucket`,
			wantLimiter: "api", wantRule: "per-user", wantField: "reservable",
		},
		{
			name: "reservable with grants", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Reservable, r.Grant = true, true }),
			want:        `floodgate: limiter "api" rule "per-user": reservable: a rule answered from quota grants cannot hold reservations`,
			wantLimiter: "api", wantRule: "per-user", wantField: "reservable",
		},
		{
			name: "buckets on token bucket", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Buckets = floodgate.TokenBucket, 10 }),
			want:        `floodgate: limiter "api" rule "per-user": buckets: applies to sliding_window only, not token_bucket`,
			wantLimiter: "api", wantRule: "per-user", wantField: "buckets",
		},
		{
			name: "buckets do not divide the window", limiter: "api",
			rules: with(func(r *floodgate.Rule) {
				r.Algorithm, r.Window, r.Buckets = floodgate.SlidingWindow, time.Millisecond, 3
			}),
			want:        `floodgate: limiter "api" rule "per-user": buckets: window 1ms does not divide into 3 buckets of whole microseconds`,
			wantLimiter: "api", wantRule: "per-user", wantField: "buckets",
		},
		{
			name: "too many buckets", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Window, r.Buckets = floodgate.SlidingWindow, time.Hour, 3601 }),
			want:        `floodgate: limiter "api" rule "per-user": buckets: must be between 1 and 3600, got 3601`,
			wantLimiter: "api", wantRule: "per-user", wantField: "buckets",
		},
		{
			name: "align on token bucket", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Algorithm, r.Align = floodgate.TokenBucket, floodgate.AlignClock }),
			want:        `floodgate: limiter "api" rule "per-user": align: applies to fixed_window only, not token_bucket`,
			wantLimiter: "api", wantRule: "per-user", wantField: "align",
		},
		{
			name: "location without calendar", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Location = time.UTC }),
			want:        `floodgate: limiter "api" rule "per-user": location: applies to calendar-aligned fixed windows only`,
			wantLimiter: "api", wantRule: "per-user", wantField: "location",
		},
		{
			name: "empty key attribute", limiter: "api",
			rules:       with(func(r *floodgate.Rule) { r.Key = []string{"tenant", ""} }),
			want:        `floodgate: limiter "api" rule "per-user": key[1]: attribute name must not be empty`,
			wantLimiter: "api", wantRule: "per-user", wantField: "key[1]",
		},
		{
			name: "override without match", limiter: "api",
			rules: with(func(r *floodgate.Rule) {
				r.Overrides = []floodgate.Override{{Match: floodgate.Attributes{"user": "vip"}, Limit: 5}, {Limit: 5}}
			}),
			want:        `floodgate: limiter "api" rule "per-user": overrides[1].match: must name at least one attribute`,
			wantLimiter: "api", wantRule: "per-user", wantField: "overrides[1].match",
		},
		{
			name: "override with zero limit", limiter: "api",
			rules: with(func(r *floodgate.Rule) {
				r.Overrides = []floodgate.Override{{Match: floodgate.Attributes{"user": "vip"}}}
			}),
			want:        `floodgate: limiter "api" rule "per-user": overrides[0].limit: must be at least 1, got 0`,
			wantLimiter: "api", wantRule: "per-user", wantField: "overrides[0].limit",
		},
		{
			name: "override burst on fixed window", limiter: "api",
			rules: with(func(r *floodgate.Rule) {
				r.Overrides = []floodgate.Override{{Match: floodgate.Attributes{"user": "vip"}, Limit: 5, Burst: 9}}
			}),
			want:        `floodgate: limiter "api" rule "per-user": overrides[0].burst: must be positive and applies to token_bucket and gcra only`,
			wantLimiter: "api", wantRule: "per-user", wantField: "overrides[0].burst",
		},
		{
			name: "override limit too large", limiter: "api",
			rules: with(func(r *floodgate.Rule) {
				r.Overrides = []floodgate.Override{{Match: floodgate.Attributes{"user": "vip"}, Limit: 1 << 60}}
			}),
			want:        `floodgate: limiter "api" rule "per-user": overrides[0].limit: 1152921504606846976 is too large (at most 2251799813685248)`,
			wantLimiter: "api", wantRule: "per-user", wantField: "overrides[0].limit",
		},
		{
			name: "second rule is the bad one", limiter: "api",
			rules:       []floodgate.Rule{okRule(), {Name: "global", Algorithm: floodgate.GCRA, Limit: 100}},
			want:        `floodgate: limiter "api" rule "global": window: must be at least 1ms, got 0s`,
			wantLimiter: "api", wantRule: "global", wantField: "window",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := tt.st
			if st == nil {
				st = mem
			} else if st == nilStore {
				st = nil
			}
			var (
				l   *floodgate.Limiter
				err error
			)
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("New panicked: %v", p)
					}
				}()
				l, err = floodgate.New(tt.limiter, st, tt.rules, tt.opts)
			}()
			if err == nil {
				t.Fatalf("New returned a limiter (%v), want error %q", l.Name(), tt.want)
			}
			if l != nil {
				t.Errorf("New returned a limiter along with error %v", err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error\n got %s\nwant %s", got, tt.want)
			}
			var ce *floodgate.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *floodgate.ConfigError", err)
			}
			if ce.Limiter != tt.wantLimiter || ce.Rule != tt.wantRule || ce.Field != tt.wantField {
				t.Errorf("ConfigError{Limiter: %q, Rule: %q, Field: %q}, want {%q, %q, %q}",
					ce.Limiter, ce.Rule, ce.Field, tt.wantLimiter, tt.wantRule, tt.wantField)
			}
		})
	}
}

// nilStore marks a validation case that passes a nil store.
var nilStore store.Store = nilStoreMarker{}

type nilStoreMarker struct{}

func (nilStoreMarker) Apply(context.Context, *store.Batch) error { return nil }

func TestNewAppliesDefaults(t *testing.T) {
	st := memory.New(&memory.Options{SweepInterval: -1})
	defer st.Close()
	l, err := floodgate.New("api", st, []floodgate.Rule{
		{Name: "sliding", Algorithm: floodgate.SlidingWindow, Limit: 5, Window: time.Second},
		{Name: "odd-sliding", Algorithm: floodgate.SlidingWindow, Limit: 5, Window: 7 * time.Millisecond},
		{Name: "bucket", Algorithm: floodgate.TokenBucket, Limit: 5, Window: time.Second},
		{Name: "gcra", Algorithm: floodgate.GCRA, Limit: 5, Window: time.Second, Burst: 2},
		{Name: "daily", Algorithm: floodgate.FixedWindow, Limit: 5, Align: floodgate.AlignDay, Location: time.UTC},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules := l.Rules()
	if got, want := rules[0].Buckets, int64(50); got != want {
		t.Errorf("1s sliding window: Buckets = %d, want %d (the largest count up to 60 dividing the window)", got, want)
	}
	if got, want := rules[1].Buckets, int64(56); got != want {
		t.Errorf("7ms sliding window: Buckets = %d, want %d", got, want)
	}
	if got, want := rules[2].Burst, int64(5); got != want {
		t.Errorf("token bucket: Burst = %d, want the limit %d", got, want)
	}
	if got, want := rules[3].Burst, int64(2); got != want {
		t.Errorf("gcra: Burst = %d, want the configured %d", got, want)
	}
	if got, want := l.FailurePolicy(), floodgate.FailOpen; got != want {
		t.Errorf("FailurePolicy() = %v, want %v", got, want)
	}
	if l.Shadow() {
		t.Error("Shadow() = true for a limiter configured without shadow")
	}
}

func TestParseNames(t *testing.T) {
	for _, a := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Concurrency} {
		got, err := store.ParseAlgorithm(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
	}
	if _, err := store.ParseAlgorithm("leaky_bucket"); err == nil ||
		err.Error() != `unknown algorithm "leaky_bucket" (want one of fixed_window, sliding_window, token_bucket, gcra, concurrency)` {
		t.Errorf("ParseAlgorithm(leaky_bucket) error = %v", err)
	}
	if _, err := store.ParseAlgorithm(""); err == nil {
		t.Error("ParseAlgorithm(\"\") succeeded")
	}
	if got, want := floodgate.Algorithm(0).String(), "Algorithm(0)"; got != want {
		t.Errorf("Algorithm(0).String() = %q, want %q", got, want)
	}
	for s, want := range map[string]floodgate.Align{"": floodgate.AlignFirstHit, "first_hit": floodgate.AlignFirstHit, "clock": floodgate.AlignClock, "day": floodgate.AlignDay, "month": floodgate.AlignMonth} {
		if got, err := store.ParseAlign(s); err != nil || got != want {
			t.Errorf("ParseAlign(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := store.ParseAlign("week"); err == nil {
		t.Error("ParseAlign(week) succeeded")
	}
}

// ConfigError.RuleIndex points at the rule at fault: a bad field, a
// duplicate name (the later rule), an unnamed rule; -1 for the limiter.
func TestConfigErrorRuleIndex(t *testing.T) {
	st := memory.New(nil)
	defer st.Close()
	named := func(name string) floodgate.Rule { r := okRule(); r.Name = name; return r }
	bad := named("b")
	bad.Window = 0
	for _, tt := range []struct {
		name  string
		rules []floodgate.Rule
		opts  *floodgate.Options
		want  int
	}{
		{"limiter field", []floodgate.Rule{named("a")}, &floodgate.Options{FailurePolicy: 7}, -1},
		{"bad field of the second rule", []floodgate.Rule{named("a"), bad}, nil, 1},
		{"duplicate name", []floodgate.Rule{named("a"), named("b"), named("a")}, nil, 2},
		{"unnamed rule", []floodgate.Rule{named("a"), named("")}, nil, 1},
	} {
		_, err := floodgate.New("api", st, tt.rules, tt.opts)
		var ce *floodgate.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("%s: error %v is not a *ConfigError", tt.name, err)
		}
		if ce.RuleIndex != tt.want {
			t.Errorf("%s: RuleIndex = %d, want %d (%v)", tt.name, ce.RuleIndex, tt.want, err)
		}
	}
}

// An override or a limit function that sets a limit but no burst keeps the
// rule's proportion of burst to limit: a VIP at 200/s on a rule of 20/s
// with burst 40 can take 400 at once, not 40.
func TestOverrideScalesBurst(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
		l, _ := memLimiter(t, []floodgate.Rule{{
			Name: "r", Algorithm: alg, Limit: 20, Burst: 40, Window: time.Second, Key: []string{"user"},
			Overrides: []floodgate.Override{{Match: floodgate.Attributes{"plan": "vip"}, Limit: 200}},
			LimitFunc: func(_ context.Context, a floodgate.Attributes) (int64, error) {
				if a["plan"] == "big" {
					return 50, nil
				}
				return 0, nil
			},
		}}, nil)
		for plan, burst := range map[string]int64{"vip": 400, "big": 100, "free": 40} {
			a := floodgate.Attributes{"user": plan, "plan": plan}
			if d, _ := l.AllowN(ctx, a, burst); !d.Allowed {
				t.Errorf("%s: plan %s: a burst of %d denied: %+v", alg, plan, burst, d)
			}
			if d, _ := l.AllowN(ctx, a, 1); d.Allowed {
				t.Errorf("%s: plan %s: a unit past the burst of %d admitted", alg, plan, burst)
			}
		}
	}
}
