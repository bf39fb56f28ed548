package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
)

// epoch is where the tests' manual clocks start.
var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var allAlgorithms = []floodgate.Algorithm{
	floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Concurrency,
}

// memLimiter returns a limiter on a fresh memory store whose clock stands at
// epoch until the test moves it.
func memLimiter(t testing.TB, rules []floodgate.Rule, opts *floodgate.Options) (*floodgate.Limiter, *clocktest.Manual) {
	t.Helper()
	store := memory.New(&memory.Options{SweepInterval: -1})
	t.Cleanup(func() { store.Close() })
	clock := clocktest.New(epoch)
	if opts == nil {
		opts = &floodgate.Options{}
	}
	opts.Clock = clock
	l, err := floodgate.New("test", store, rules, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, clock
}

func user(id string) floodgate.Attributes { return floodgate.Attributes{"user": id} }

// peek looks at attrs without consuming and fails the test on error.
func peek(t testing.TB, l *floodgate.Limiter, attrs floodgate.Attributes) floodgate.Outcome {
	t.Helper()
	d, err := l.Decide(context.Background(), floodgate.ModeConsume, attrs, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ruleResult returns the named rule's result in d.
func ruleResult(t testing.TB, d *floodgate.Outcome, name string) floodgate.RuleDecision {
	t.Helper()
	for _, r := range d.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("decision has no result for rule %q (has %v)", name, d.Rules)
	return floodgate.RuleDecision{}
}

func TestConcurrentCallersOnOneKeyAdmitExactlyTheLimit(t *testing.T) {
	const (
		limit      = 100
		goroutines = 64
		tries      = 6 // 384 attempts for 100 units
	)
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			// An hour-long window on a clock that never moves: nothing
			// refills, nothing expires, so exactly limit units can be had.
			l, _ := memLimiter(t, []floodgate.Rule{
				{Name: "per-user", Algorithm: alg, Limit: limit, Window: time.Hour, Key: []string{"user"}},
			}, nil)
			attrs := user("alice")
			var admitted, denied atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range tries {
						d := l.Allow(context.Background(), attrs)
						switch {
						case d.Allowed && d.Reason == floodgate.ReasonNone:
							admitted.Add(1)
						case !d.Allowed && d.Reason == floodgate.ReasonLimit && d.Remaining == 0:
							denied.Add(1)
						default:
							t.Errorf("unexpected decision %+v", d)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			if got := admitted.Load(); got != limit {
				t.Errorf("admitted %d of %d attempts, want exactly %d", got, goroutines*tries, limit)
			}
			if got, want := denied.Load(), int64(goroutines*tries-limit); got != want {
				t.Errorf("denied %d, want %d", got, want)
			}
			if d := peek(t, l, attrs); d.Allowed || d.Remaining != 0 {
				t.Errorf("after the run a peek says Allowed=%v Remaining=%d, want false, 0", d.Allowed, d.Remaining)
			}
		})
	}
}

// TestConcurrentMultiRuleDenialsChargeNothing runs three rules of different
// algorithms and limits over overlapping keys from many goroutines, with
// costs of 1 to 3, and then checks that every counter holds exactly the units
// of the admitted decisions that touched it: no denied decision, including
// one that some of its rules would have admitted, left anything behind.
func TestConcurrentMultiRuleDenialsChargeNothing(t *testing.T) {
	const (
		users, tenants = 8, 4
		userLimit      = 30
		tenantLimit    = 50
		globalLimit    = 150
		goroutines     = 64
		tries          = 20
	)
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: userLimit, Window: time.Hour, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.SlidingWindow, Limit: tenantLimit, Window: time.Hour, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.TokenBucket, Limit: globalLimit, Window: time.Hour},
	}, nil)
	var (
		mu                 sync.Mutex
		byUser             [users]int64
		byTenant           [tenants]int64
		total, deniedCount int64
	)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 42))
			<-start
			for range tries {
				u, tn, cost := rng.IntN(users), rng.IntN(tenants), 1+rng.Int64N(3)
				attrs := floodgate.Attributes{"user": fmt.Sprint("u", u), "tenant": fmt.Sprint("t", tn)}
				d, err := l.AllowN(context.Background(), attrs, cost)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if d.Allowed {
					byUser[u] += cost
					byTenant[tn] += cost
					total += cost
				} else {
					deniedCount++
				}
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if deniedCount == 0 {
		t.Fatal("no decision was denied: the test does not exercise contention")
	}
	for u := range users {
		d := peek(t, l, user(fmt.Sprint("u", u)))
		if got, want := ruleResult(t, &d, "per-user").Remaining, userLimit-byUser[u]; got != want {
			t.Errorf("user u%d: Remaining = %d, want %d - %d admitted = %d", u, got, userLimit, byUser[u], want)
		}
		if byUser[u] > userLimit {
			t.Errorf("user u%d was admitted %d units over a limit of %d", u, byUser[u], userLimit)
		}
	}
	for tn := range tenants {
		d := peek(t, l, floodgate.Attributes{"tenant": fmt.Sprint("t", tn)})
		if got, want := ruleResult(t, &d, "per-tenant").Remaining, tenantLimit-byTenant[tn]; got != want {
			t.Errorf("tenant t%d: Remaining = %d, want %d - %d admitted = %d", tn, got, tenantLimit, byTenant[tn], want)
		}
	}
	d := peek(t, l, nil)
	if got, want := ruleResult(t, &d, "global").Remaining, globalLimit-total; got != want {
		t.Errorf("global: Remaining = %d, want %d - %d admitted = %d", got, globalLimit, total, want)
	}
	if total > globalLimit {
		t.Errorf("admitted %d units in total over a global limit of %d", total, globalLimit)
	}
}

func TestPeekConsumesNothing(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l, _ := memLimiter(t, []floodgate.Rule{
				{Name: "r", Algorithm: alg, Limit: 3, Window: time.Minute, Key: []string{"user"}},
			}, nil)
			ctx := context.Background()
			attrs := user("alice")
			for i := range 2 {
				if d := must(l.Decide(ctx, floodgate.ModeConsume, attrs, 1)); !d.Allowed {
					t.Fatalf("request %d denied: %+v", i+1, d)
				}
			}
			for range 50 {
				d := peek(t, l, attrs)
				if !d.Allowed || d.Remaining != 1 {
					t.Fatalf("peek with one unit left: Allowed=%v Remaining=%d, want true, 1", d.Allowed, d.Remaining)
				}
				if d.Ticket().Valid() {
					t.Fatal("a peek returned a refundable ticket")
				}
			}
			if d, err := l.Peek(ctx, attrs, 2); err != nil || d.Allowed {
				t.Errorf("Peek(2) with one unit left: Allowed=%v err=%v, want false, nil", d.Allowed, err)
			}
			if d := l.Allow(ctx, attrs); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("the last unit after 50 peeks: Allowed=%v Remaining=%d, want true, 0", d.Allowed, d.Remaining)
			}
			d := peek(t, l, attrs)
			if d.Allowed || d.Reason != floodgate.ReasonLimit || d.RetryAfter <= 0 {
				t.Errorf("peek at an exhausted key = %+v, want denied by limit with a retry-after", d)
			}
		})
	}
}

func TestNegativeCostsAreErrors(t *testing.T) {
	l, _ := memLimiter(t, []floodgate.Rule{okRule()}, nil)
	ctx := context.Background()
	if _, err := l.AllowN(ctx, user("a"), -1); err == nil || err.Error() != `floodgate: limiter "test": cost -1 must not be negative` {
		t.Errorf("AllowN(-1) error = %v", err)
	}
	if _, err := l.Record(ctx, user("a"), -2); err == nil || err.Error() != `floodgate: limiter "test": recorded cost -2 must not be negative` {
		t.Errorf("Record(-2) error = %v", err)
	}
	if _, err := l.Peek(ctx, user("a"), 0); err == nil || err.Error() != `floodgate: limiter "test": peek cost 0 must be at least 1` {
		t.Errorf("Peek(0) error = %v", err)
	}
	if d := peek(t, l, user("a")); d.Remaining != 10 {
		t.Errorf("rejected calls consumed: Remaining = %d, want 10", d.Remaining)
	}
}

func TestCostBeyondCapacityIsNever(t *testing.T) {
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			r := floodgate.Rule{Name: "r", Algorithm: alg, Limit: 10, Window: time.Minute, Key: []string{"user"}}
			capacity := int64(10)
			if alg == floodgate.TokenBucket || alg == floodgate.GCRA {
				r.Burst, capacity = 15, 15
			}
			l, _ := memLimiter(t, []floodgate.Rule{r}, nil)
			ctx := context.Background()
			d, err := l.Decide(ctx, floodgate.ModeConsume, user("a"), capacity+1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || !d.Never || d.RetryAfter != 0 || d.Reason != floodgate.ReasonLimit {
				t.Errorf("cost %d over capacity %d: Allowed=%v Never=%v RetryAfter=%v Reason=%v, want false, true, 0, limit",
					capacity+1, capacity, d.Allowed, d.Never, d.RetryAfter, d.Reason)
			}
			if d.Ticket().Valid() {
				t.Error("a denied decision returned a refundable ticket")
			}
			if d, _ := l.AllowN(ctx, user("a"), capacity); !d.Allowed || d.Remaining != 0 {
				t.Errorf("cost %d at full capacity after the Never denial: Allowed=%v Remaining=%d, want true, 0", capacity, d.Allowed, d.Remaining)
			}
		})
	}
}

func TestRecordPushesPastTheLimit(t *testing.T) {
	ctx := context.Background()
	t.Run("token_bucket", func(t *testing.T) {
		// One token a second, ten at most.
		l, clock := memLimiter(t, []floodgate.Rule{
			{Name: "tokens", Algorithm: floodgate.TokenBucket, Limit: 10, Window: 10 * time.Second, Key: []string{"user"}},
		}, nil)
		d, err := l.Decide(ctx, floodgate.ModeRecord, user("a"), 15)
		if err != nil {
			t.Fatal(err)
		}
		// 10 - 15 = -5 tokens: one unit needs 6 more, 6 seconds away.
		if d.Allowed || d.Remaining != 0 || d.RetryAfter != 6*time.Second {
			t.Errorf("after recording 15 of 10: Allowed=%v Remaining=%d RetryAfter=%v, want false, 0, 6s", d.Allowed, d.Remaining, d.RetryAfter)
		}
		if d.Ticket().Valid() {
			t.Error("Record returned a refundable ticket")
		}
		d = must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
		if d.Allowed || d.RetryAfter != 6*time.Second {
			t.Errorf("Allow after the record: Allowed=%v RetryAfter=%v, want false, 6s", d.Allowed, d.RetryAfter)
		}
		clock.Advance(6*time.Second - time.Microsecond)
		if d := l.Allow(ctx, user("a")); d.Allowed || d.RetryAfter != time.Microsecond {
			t.Errorf("1µs early: Allowed=%v RetryAfter=%v, want false, 1µs", d.Allowed, d.RetryAfter)
		}
		clock.Advance(time.Microsecond)
		if d := l.Allow(ctx, user("a")); !d.Allowed || d.Remaining != 0 {
			t.Errorf("at the retry-after: Allowed=%v Remaining=%d, want true, 0", d.Allowed, d.Remaining)
		}
	})
	t.Run("fixed_window", func(t *testing.T) {
		l, clock := memLimiter(t, []floodgate.Rule{
			{Name: "spend", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"user"}},
		}, nil)
		if d := l.Allow(ctx, user("a")); !d.Allowed {
			t.Fatal("first request denied")
		}
		clock.Advance(10 * time.Second)
		d, err := l.Record(ctx, user("a"), 250)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed || d.RetryAfter != 50*time.Second {
			t.Errorf("after recording past the limit: Allowed=%v RetryAfter=%v, want false, 50s", d.Allowed, d.RetryAfter)
		}
		clock.Advance(50 * time.Second)
		if d := l.Allow(ctx, user("a")); !d.Allowed || d.Remaining != 99 {
			t.Errorf("in the next window: Allowed=%v Remaining=%d, want true, 99", d.Allowed, d.Remaining)
		}
	})
}

func TestBindingRule(t *testing.T) {
	ctx := context.Background()
	t.Run("admitted: fewest remaining", func(t *testing.T) {
		l, _ := memLimiter(t, []floodgate.Rule{
			{Name: "ten", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}},
			{Name: "five", Algorithm: floodgate.TokenBucket, Limit: 5, Window: time.Minute, Key: []string{"user"}},
			{Name: "twenty", Algorithm: floodgate.SlidingWindow, Limit: 20, Window: time.Minute, Key: []string{"user"}},
		}, nil)
		d := l.Allow(ctx, user("a"))
		if !d.Allowed || d.Rule != "five" || d.Limit != 5 || d.Remaining != 4 {
			t.Errorf("binding rule = %q limit %d remaining %d, want five, 5, 4", d.Rule, d.Limit, d.Remaining)
		}
		if d.RetryAfter != 0 {
			t.Errorf("admitted decision has RetryAfter %v", d.RetryAfter)
		}
	})
	t.Run("denied: the longest wait", func(t *testing.T) {
		l, clock := memLimiter(t, []floodgate.Rule{
			{Name: "minute", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"}},
			{Name: "hour", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour, Key: []string{"user"}},
			{Name: "roomy", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Hour, Key: []string{"user"}},
		}, nil)
		l.Allow(ctx, user("a"))
		l.Allow(ctx, user("a"))
		clock.Advance(10 * time.Second)
		d := must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
		if d.Allowed || d.Rule != "hour" || d.RetryAfter != time.Hour-10*time.Second {
			t.Errorf("denied decision binds %q with RetryAfter %v, want hour, %v", d.Rule, d.RetryAfter, time.Hour-10*time.Second)
		}
		if r := ruleResult(t, &d, "minute"); r.Allowed || r.RetryAfter != 50*time.Second {
			t.Errorf("minute rule: Allowed=%v RetryAfter=%v, want false, 50s", r.Allowed, r.RetryAfter)
		}
		if r := ruleResult(t, &d, "roomy"); !r.Allowed || r.Remaining != 98 {
			t.Errorf("roomy rule: Allowed=%v Remaining=%d, want true, 98 (nothing charged)", r.Allowed, r.Remaining)
		}
	})
	t.Run("denied: never beats any wait", func(t *testing.T) {
		l, _ := memLimiter(t, []floodgate.Rule{
			{Name: "small", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour, Key: []string{"user"}},
			{Name: "large", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}},
		}, nil)
		l.AllowN(ctx, user("a"), 9)
		d, _ := l.AllowN(ctx, user("a"), 5)
		if d.Allowed || d.Rule != "small" || !d.Never || d.RetryAfter != 0 {
			t.Errorf("got Rule=%q Never=%v RetryAfter=%v, want small, true, 0", d.Rule, d.Never, d.RetryAfter)
		}
	})
}

func TestObserverSeesEveryDecision(t *testing.T) {
	var events []floodgate.Event
	var seen []floodgate.Decision
	l, _ := memLimiter(t, []floodgate.Rule{okRule()}, &floodgate.Options{
		Observer: func(_ context.Context, e floodgate.Event) {
			events = append(events, e)
			seen = append(seen, e.Decision)
		},
	})
	ctx := context.Background()
	var returned []floodgate.Decision
	returned = append(returned, l.Allow(ctx, user("a")))
	d, _ := l.AllowN(ctx, user("a"), 4)
	returned = append(returned, d)
	d, _ = l.AllowN(ctx, user("a"), 0)
	returned = append(returned, d)
	d, _ = l.Record(ctx, user("a"), 20)
	returned = append(returned, d)
	d, _ = l.AllowN(ctx, user("a"), 3)
	returned = append(returned, d)
	want := []struct {
		mode    floodgate.Mode
		cost    int64
		allowed bool
	}{
		{floodgate.ModeConsume, 1, true},
		{floodgate.ModeConsume, 4, true},
		{floodgate.ModePeek, 1, true},
		{floodgate.ModeRecord, 20, false},
		{floodgate.ModeConsume, 3, false},
	}
	if len(events) != len(want) {
		t.Fatalf("observer saw %d events, want %d", len(events), len(want))
	}
	for i, w := range want {
		e := events[i]
		if e.Limiter != "test" || e.Mode != w.mode || e.Cost != w.cost || seen[i].Allowed != w.allowed {
			t.Errorf("event %d = {%s %v cost %d allowed %v}, want {test %v cost %d allowed %v}",
				i, e.Limiter, e.Mode, e.Cost, seen[i].Allowed, w.mode, w.cost, w.allowed)
		}
		if r := returned[i]; seen[i].Remaining != r.Remaining || seen[i].RetryAfter != r.RetryAfter || seen[i].Rule != r.Rule {
			t.Errorf("event %d decision %+v differs from the one returned %+v", i, seen[i], r)
		}
		if e.Weight != 1 {
			t.Errorf("event %d: weight %d, want 1 (no sampling)", i, e.Weight)
		}
	}
}

// TestObserveSample: with ObserveSample 4 the observer is told of every
// denied and shadow-denied decision (weight 1) and of a random quarter of
// the others (weight 4), whose weights add up to their number within six
// standard deviations. Decide's Outcome is whole whether or not the
// observer is told.
func TestObserveSample(t *testing.T) {
	var clean, shadowDenied, denied, weight int64
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "enforced", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour, Key: []string{"user"}},
		{Name: "dark", Algorithm: floodgate.FixedWindow, Limit: 500, Window: time.Hour, Key: []string{"user"}, Shadow: true},
	}, &floodgate.Options{
		ObserveSample: 4,
		Observer: func(_ context.Context, e floodgate.Event) {
			d := e.Decision
			switch {
			case !d.Allowed:
				denied++
			case d.ShadowDenied:
				shadowDenied++
			default:
				clean++
				weight += e.Weight
				return
			}
			if e.Weight != 1 {
				t.Errorf("%+v: weight %d, want 1", d, e.Weight)
			}
		},
	})
	ctx := context.Background()
	for range 1999 {
		l.AllowKey(ctx, "a")
	}
	o, err := l.Decide(ctx, floodgate.ModeConsume, user("b"), 1)
	if err != nil || len(o.Rules) != 2 || !o.Allowed {
		t.Errorf("Decide: %+v, %v: want an admission with both rules' results", o, err)
	}
	// a: 500 admitted, 500 admitted but over the shadow rule, 999 denied;
	// b: 1 admitted.
	if denied != 999 || shadowDenied != 500 {
		t.Errorf("told of %d denied and %d shadow-denied decisions, want 999 and 500", denied, shadowDenied)
	}
	if slack := int64(6 * math.Sqrt(501*3)); weight < 501-slack || weight > 501+slack || clean*4 != weight {
		t.Errorf("told of %d admitted decisions of weight %d in all, want 4 each and 501 ± %d in all", clean, weight, slack)
	}
	st := memory.New(nil)
	defer st.Close()
	for _, n := range []int{-1, 1<<20 + 1} {
		_, err := floodgate.New("bad", st, []floodgate.Rule{okRule()}, &floodgate.Options{ObserveSample: n})
		if ce := (*floodgate.ConfigError)(nil); !errors.As(err, &ce) || !strings.Contains(err.Error(), "observe_sample") {
			t.Errorf("ObserveSample %d: %v, want a ConfigError naming observe_sample", n, err)
		}
	}
}

func TestOverridesAndLimitFunc(t *testing.T) {
	ctx := context.Background()
	var planLimit atomic.Int64
	l, _ := memLimiter(t, []floodgate.Rule{{
		Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"},
		Overrides: []floodgate.Override{
			{Match: floodgate.Attributes{"user": "vip"}, Limit: 5},
			{Match: floodgate.Attributes{"user": "vip", "plan": "pro"}, Limit: 50}, // shadowed: the first match wins
			{Match: floodgate.Attributes{"plan": "free", "region": "eu"}, Limit: 1},
		},
		LimitFunc: func(_ context.Context, a floodgate.Attributes) (int64, error) {
			if a["plan"] == "pro" {
				return planLimit.Load(), nil
			}
			return 0, nil
		},
	}}, nil)
	admit := func(attrs floodgate.Attributes) int {
		n := 0
		for range 100 {
			if l.Allow(ctx, attrs).Allowed {
				n++
			}
		}
		return n
	}
	if got := admit(user("bob")); got != 2 {
		t.Errorf("default limit: admitted %d, want 2", got)
	}
	if got := admit(floodgate.Attributes{"user": "vip"}); got != 5 {
		t.Errorf("override: admitted %d, want 5", got)
	}
	if got := admit(floodgate.Attributes{"user": "eve", "plan": "free", "region": "eu"}); got != 1 {
		t.Errorf("two-attribute override: admitted %d, want 1", got)
	}
	if got := admit(floodgate.Attributes{"user": "ann", "plan": "free"}); got != 2 {
		t.Errorf("partial match must not apply an override: admitted %d, want 2", got)
	}
	// LimitFunc returning 0 keeps the limit found so far.
	if got := admit(floodgate.Attributes{"user": "vip", "plan": "pro", "x": "1"}); got != 0 {
		t.Errorf("vip already used its override: admitted %d, want 0", got)
	}
	// A limit that changes applies on the next decision, on the same state.
	planLimit.Store(8)
	pro := floodgate.Attributes{"user": "carol", "plan": "pro"}
	for range 6 {
		l.Allow(ctx, pro)
	}
	planLimit.Store(3)
	if d := l.Allow(ctx, pro); d.Allowed || d.Limit != 3 || d.Remaining != 0 {
		t.Errorf("limit lowered to 3 under 6 used: Allowed=%v Limit=%d Remaining=%d, want false, 3, 0", d.Allowed, d.Limit, d.Remaining)
	}
	planLimit.Store(10)
	if d := must(l.Decide(ctx, floodgate.ModeConsume, pro, 1)); !d.Allowed || d.Limit != 10 || d.Remaining != 3 {
		t.Errorf("limit raised to 10 over 6 used: Allowed=%v Limit=%d Remaining=%d, want true, 10, 3", d.Allowed, d.Limit, d.Remaining)
	}
}

func TestRulesWithoutTheirKeyAreSkipped(t *testing.T) {
	ctx := context.Background()
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"tenant"}},
		{Name: "per-tenant-route", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"tenant", "route"}},
		{Name: "by-func", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute,
			KeyFunc: func(a floodgate.Attributes) string { return a["ip"] }},
	}, nil)
	tests := []struct {
		attrs floodgate.Attributes
		want  []string
	}{
		{floodgate.Attributes{"user": "a"}, []string{"per-user"}},
		{floodgate.Attributes{"user": "a", "tenant": ""}, []string{"per-user"}},
		{floodgate.Attributes{"tenant": "t", "route": "/x"}, []string{"per-tenant", "per-tenant-route"}},
		{floodgate.Attributes{"route": "/x", "ip": "10.0.0.1"}, []string{"by-func"}},
		{floodgate.Attributes{"user": "a", "tenant": "t", "route": "/x", "ip": "::1"}, []string{"per-user", "per-tenant", "per-tenant-route", "by-func"}},
	}
	for _, tt := range tests {
		d := must(l.Decide(ctx, floodgate.ModeConsume, tt.attrs, 1))
		var got []string
		for _, r := range d.Rules {
			got = append(got, r.Name)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%v: applied rules %v, want %v", tt.attrs, got, tt.want)
		}
	}
	// No rule applies: admitted, with no binding rule and nothing to refund.
	d := must(l.Decide(ctx, floodgate.ModeConsume, floodgate.Attributes{"route": "/x"}, 1))
	if !d.Allowed || d.Rule != "" || len(d.Rules) != 0 || d.Ticket().Valid() {
		t.Errorf("no applicable rule: %+v, want admitted with no rule", d)
	}
}

func TestDecisionWithManyRules(t *testing.T) {
	ctx := context.Background()
	var rules []floodgate.Rule
	for i := range 7 {
		rules = append(rules, floodgate.Rule{
			Name: fmt.Sprint("r", i), Algorithm: allAlgorithms[i%len(allAlgorithms)],
			Limit: int64(10 + i), Window: time.Minute, Key: []string{"user"},
		})
	}
	l, _ := memLimiter(t, rules, nil)
	d, _ := l.Decide(ctx, floodgate.ModeConsume, user("a"), 4)
	rs := d.Rules
	if len(rs) != 7 {
		t.Fatalf("Rules() has %d results, want 7", len(rs))
	}
	for i, r := range rs {
		if want := fmt.Sprint("r", i); r.Name != want || !r.Allowed || r.Limit != int64(10+i) || r.Remaining != int64(10+i-4) {
			t.Errorf("Rules()[%d] = %+v, want %s admitted with %d of %d left", i, r, want, 10+i-4, 10+i)
		}
	}
	if d.Rule != "r0" || d.Remaining != 6 {
		t.Errorf("binding rule %q with %d left, want r0 with 6", d.Rule, d.Remaining)
	}
	tk := d.Ticket()
	if len(tk.Entries) != 7 {
		t.Fatalf("ticket has %d entries, want 7", len(tk.Entries))
	}
	if err := l.Refund(ctx, tk); err != nil {
		t.Fatal(err)
	}
	p := peek(t, l, user("a"))
	for i, r := range p.Rules {
		if r.Remaining != int64(10+i) {
			t.Errorf("after the refund rule %s has %d left, want %d", r.Name, r.Remaining, 10+i)
		}
	}
}

func TestShadow(t *testing.T) {
	ctx := context.Background()
	t.Run("rule", func(t *testing.T) {
		l, _ := memLimiter(t, []floodgate.Rule{
			{Name: "enforced", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"user"}},
			{Name: "dark", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"}, Shadow: true},
		}, nil)
		for i := range 5 {
			d := must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
			if !d.Allowed {
				t.Fatalf("request %d denied by %q; a shadow rule must not deny", i+1, d.Rule)
			}
			dark := ruleResult(t, &d, "dark")
			if wouldDeny := i >= 2; dark.Allowed == wouldDeny || d.ShadowDenied != wouldDeny || !dark.Shadow {
				t.Errorf("request %d: dark Allowed=%v Shadow=%v, ShadowDenied=%v; want %v, true, %v", i+1, dark.Allowed, dark.Shadow, d.ShadowDenied, !wouldDeny, wouldDeny)
			}
			if i >= 2 && d.Rule != "enforced" {
				t.Errorf("request %d binds %q; an enforced rule must bind before a shadow one", i+1, d.Rule)
			}
		}
		// The dark rule counted only the two it admitted.
		p := peek(t, l, user("a"))
		if got := ruleResult(t, &p, "dark").Remaining; got != 0 {
			t.Errorf("dark rule Remaining = %d, want 0", got)
		}
		if d := l.Allow(ctx, user("a")); d.Allowed || d.Rule != "enforced" || d.ShadowDenied != true {
			t.Errorf("6th request: %+v, want denied by enforced", d)
		}
	})
	t.Run("limiter", func(t *testing.T) {
		l, _ := memLimiter(t, []floodgate.Rule{okRule()}, &floodgate.Options{Shadow: true})
		for i := range 15 {
			d := l.Allow(ctx, user("a"))
			if !d.Allowed || d.ShadowDenied != (i >= 10) {
				t.Errorf("request %d to a shadow limiter: Allowed=%v ShadowDenied=%v, want true, %v", i+1, d.Allowed, d.ShadowDenied, i >= 10)
			}
		}
	})
}

func TestReset(t *testing.T) {
	ctx := context.Background()
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.GCRA, Limit: 2, Window: time.Hour, Key: []string{"tenant"}},
	}, nil)
	ann := floodgate.Attributes{"user": "ann", "tenant": "acme"}
	bea := floodgate.Attributes{"user": "bea", "tenant": "other"}
	for range 2 {
		l.Allow(ctx, ann)
		l.Allow(ctx, bea)
	}
	if d := l.Allow(ctx, ann); d.Allowed {
		t.Fatal("ann admitted over her limit")
	}
	if err := l.Reset(ctx, ann); err != nil {
		t.Fatal(err)
	}
	if d := l.Allow(ctx, ann); !d.Allowed || d.Remaining != 1 {
		t.Errorf("after Reset: Allowed=%v Remaining=%d, want true, 1", d.Allowed, d.Remaining)
	}
	if d := l.Allow(ctx, bea); d.Allowed {
		t.Error("Reset of ann also reset bea")
	}
	if err := l.Reset(ctx, floodgate.Attributes{}); err != nil {
		t.Errorf("Reset with no applicable rule = %v, want nil", err)
	}
}

func TestEnumNames(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{floodgate.ReasonNone.String(), ""},
		{floodgate.ReasonLimit.String(), "limit"},
		{floodgate.ReasonStore.String(), "store"},
		{floodgate.ModeConsume.String(), "consume"},
		{floodgate.ModePeek.String(), "peek"},
		{floodgate.ModeRecord.String(), "record"},
		{store.Refund.String(), "refund"},
		{store.Reset.String(), "reset"},
		{floodgate.Mode(99).String(), "mode?"},
		{floodgate.FailOpen.String(), "open"},
		{floodgate.FailClosed.String(), "closed"},
		{floodgate.AlignMonth.String(), "month"},
		{floodgate.Align(9).String(), "Align(9)"},
		{floodgate.Concurrency.String(), "concurrency"},
		{floodgate.SlidingWindow.String(), "sliding_window"},
	} {
		if tt.got != tt.want {
			t.Errorf("String() = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestRuleByName(t *testing.T) {
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 20, Window: time.Second, Key: []string{"user"}},
	}, nil)
	r, ok := l.Rule("per-user")
	if !ok || r.Name != "per-user" || r.Limit != 20 || r.Burst != 20 {
		t.Errorf("Rule(per-user) = %+v, %v; want the rule with its default burst 20", r, ok)
	}
	if !reflect.DeepEqual(r, l.Rules()[0]) {
		t.Errorf("Rule(per-user) = %+v, Rules()[0] = %+v: want the same", r, l.Rules()[0])
	}
	if _, ok := l.Rule("nope"); ok {
		t.Error("Rule(nope) found a rule")
	}
}

// Two live limiters of one name on one store would read and write the same
// keys whatever their rules: the second is refused unless it has the same
// rules or takes over from the first (a reload), or the first was closed.
func TestSameNameOnOneStore(t *testing.T) {
	for _, st := range []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store {
			s := memory.New(&memory.Options{SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(t *testing.T) store.Store {
			srv := redistest.Start(t)
			s, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	} {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			clock := clocktest.New(epoch)
			opts := func(replaces *floodgate.Limiter) *floodgate.Options {
				return &floodgate.Options{Clock: clock, Replaces: replaces}
			}
			perMin := []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"user"}}}
			perHour := []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Hour, Key: []string{"user"}}}
			first, err := floodgate.New("api", store, perMin, opts(nil))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := floodgate.New("api", store, perHour, opts(nil)); err == nil || !strings.Contains(err.Error(), `limiter "api"`) {
				t.Fatalf("a second live limiter api with other rules: err %v, want one naming it", err)
			}
			if _, err := floodgate.New("other", store, perHour, opts(nil)); err != nil {
				t.Fatalf("another name: %v", err)
			}
			twin, err := floodgate.New("api", store, perMin, opts(nil))
			if err != nil {
				t.Fatalf("the same limiter made twice: %v", err)
			}
			// A reload hands over: the new version takes over the keys
			// (its window is another, so it counts in a state of its own:
			// see TestChangedWindowStartsANewState).
			first.Allow(context.Background(), user("x"))
			next, err := floodgate.New("api", store, perHour, opts(first))
			if err != nil {
				t.Fatalf("a replacement: %v", err)
			}
			if d := peek(t, next, user("x")); d.Remaining != 5 {
				t.Fatalf("the replacement sees %d left, want 5 (a new window, a new state)", d.Remaining)
			}
			first.Close()
			twin.Close()
			next.Close()
			if _, err := floodgate.New("api", store, perHour, opts(nil)); err != nil {
				t.Fatalf("after Close: %v", err)
			}
		})
	}
}

// must is the outcome of a Decide call that cannot fail.
func must(o floodgate.Outcome, err error) floodgate.Outcome {
	if err != nil {
		panic(err)
	}
	return o
}

// AllowKey is Allow with the limiter's one key attribute: the same counts,
// overrides and global rules, on both paths (with and without attributes
// needed for overrides); on a limiter keyed on several attributes it is a
// programming error, denied as invalid whatever the failure policy, and
// neither logged nor counted as a store failure.
func TestAllowKeyIsAllowOnTheKeyAttribute(t *testing.T) {
	ctx := context.Background()
	rules := []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"user"}},
		{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute},
	}
	withOverride := append([]floodgate.Rule(nil), rules...)
	withOverride[0].Overrides = []floodgate.Override{{Match: floodgate.Attributes{"user": "vip"}, Limit: 4}}
	shadow := rules[0]
	shadow.Shadow = true
	cases := map[string][]floodgate.Rule{
		"plain": rules, "override": withOverride,
		// One rule: AllowKey's own short way on the bound path.
		"one rule": rules[:1], "one global rule": rules[1:], "one shadow rule": {shadow},
	}
	for name, rs := range cases {
		t.Run(name, func(t *testing.T) {
			byKey, _ := memLimiter(t, rs, nil)
			byAttrs, _ := memLimiter(t, rs, nil)
			for i, key := range []string{"vip", "vip", "a:b", "vip", "vip", "vip", "c"} {
				got, want := byKey.AllowKey(ctx, key), byAttrs.Allow(ctx, user(key))
				if got != want {
					t.Fatalf("request %d (%q): AllowKey = %+v, Allow = %+v", i, key, got, want)
				}
			}
		})
	}
	for _, policy := range []floodgate.FailurePolicy{floodgate.FailOpen, floodgate.FailClosed} {
		var logs syncbuf.Buffer
		composite, _ := memLimiter(t, []floodgate.Rule{
			{Name: "pair", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"org", "user"}},
		}, &floodgate.Options{FailurePolicy: policy, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if d := composite.AllowKey(ctx, "ann"); d.Allowed || d.Reason != floodgate.ReasonInvalid || !errors.Is(d.Err, floodgate.ErrNotOneKey) {
			t.Errorf("AllowKey on a composite-key limiter failing %v = %+v, want denied as invalid with ErrNotOneKey", policy, d)
		}
		if logs.String() != "" {
			t.Errorf("AllowKey on a composite-key limiter logged %q", logs.String())
		}
	}
	// Global rules alone need no key, with a limit function or without.
	global, _ := memLimiter(t, []floodgate.Rule{
		{Name: "all", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute,
			LimitFunc: func(context.Context, floodgate.Attributes) (int64, error) { return 0, nil }},
	}, nil)
	if d := global.AllowKey(ctx, "ann"); !d.Allowed || d.Rule != "all" {
		t.Errorf("first AllowKey on a global rule = %+v, want admitted by it", d)
	}
	if d := global.AllowKey(ctx, "bob"); d.Allowed || d.Reason != floodgate.ReasonLimit {
		t.Errorf("second AllowKey on a global rule of 1 = %+v, want denied by the limit", d)
	}
}

// A rule whose key attribute a request lacks is skipped, the Observer sees
// it missing from the Event's rules; under RequireKeys the decision is
// denied as invalid, names the rule and attributes, and charges nothing.
func TestMissingKey(t *testing.T) {
	ctx := context.Background()
	rules := []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"user"}},
		{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute},
	}
	var told []string
	skipping, _ := memLimiter(t, rules, &floodgate.Options{Observer: func(_ context.Context, e floodgate.Event) {
		for _, r := range e.Rules() {
			told = append(told, r.Rule)
		}
	}})
	if d := skipping.Allow(ctx, floodgate.Attributes{"usr": "ann"}); !d.Allowed || d.Rule != "global" || d.Remaining != 4 {
		t.Errorf("a typo skips per-user: %+v, want admitted by global alone", d)
	}
	if fmt.Sprint(told) != "[global]" {
		t.Errorf("the Observer was told of rules %v, want [global]: per-user was skipped", told)
	}
	strict, _ := memLimiter(t, rules, &floodgate.Options{RequireKeys: true})
	for _, attrs := range []floodgate.Attributes{{"usr": "ann"}, {"user": ""}, nil} {
		d := strict.Allow(ctx, attrs)
		var ke *floodgate.KeyError
		if d.Allowed || d.Reason != floodgate.ReasonInvalid || !errors.As(d.Err, &ke) || ke.Rule != "per-user" || fmt.Sprint(ke.Attributes) != "[user]" || d.Rule != "per-user" {
			t.Errorf("RequireKeys, attributes %v: %+v, want denied as invalid naming per-user and [user]", attrs, d)
		}
	}
	if d := peek(t, strict, user("ann")); d.Rules[1].Remaining != 5 {
		t.Errorf("global has %d left after three invalid requests, want 5: they charged nothing", d.Rules[1].Remaining)
	}
	if d := strict.Allow(ctx, user("ann")); !d.Allowed {
		t.Errorf("RequireKeys with every key: %+v, want admitted", d)
	}
}
