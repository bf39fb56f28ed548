package overlimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/overlimit"
	"github.com/floodgate-go/floodgate/storetest"
)

var ctx = context.Background()

// newLimiter returns a limiter of rules on st, on clock (nil for the wall
// clock).
func newLimiter(t *testing.T, name string, st store.Store, clock floodgate.Clock, rules ...floodgate.Rule) *floodgate.Limiter {
	t.Helper()
	lim, err := floodgate.New(name, st, rules, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	return lim
}

// eachBackend runs test over a fresh store of every backend.
func eachBackend(t *testing.T, test func(t *testing.T, inner store.Store)) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) { test(t, be.start(t)(t)) })
	}
}

// since returns the batches that reached the inner store since its last
// call.
func (c *counted) since() int64 { return c.calls.Swap(0) }

// TestFlood floods a denied key: the denials are answered without a single
// inner call, peeks still go to the inner store, and a refund through the
// decorator drops the remembered denial.
func TestFlood(t *testing.T) {
	eachBackend(t, func(t *testing.T, st store.Store) {
		clock := clocktest.New(time.Now())
		inner := &counted{Store: st}
		lim := newLimiter(t, "flood", overlimit.New(inner, &overlimit.Options{MaxAge: -1}), clock,
			floodgate.Rule{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"user"}})
		x := floodgate.Attributes{"user": "x"}
		var first floodgate.Outcome
		for i := range 3 {
			d := must(lim.Decide(ctx, floodgate.ModeConsume, x, 1))
			if !d.Allowed {
				t.Fatalf("request %d denied", i)
			}
			if i == 0 {
				first = d
			}
		}
		clock.Advance(10 * time.Second)
		if d := lim.Allow(ctx, x); d.Allowed || d.RetryAfter != 50*time.Second {
			t.Fatalf("4th request: %+v, want denied for 50s (and remembered)", d)
		}
		inner.since()
		for range 100 {
			clock.Advance(100 * time.Millisecond)
			d := lim.Allow(ctx, x)
			if d.Allowed || d.Rule != "user" || d.Reason != floodgate.ReasonLimit {
				t.Fatalf("flood: %+v, want denied by user", d)
			}
		}
		if d := lim.Allow(ctx, floodgate.Attributes{"user": "y"}); !d.Allowed {
			t.Fatalf("another key: %+v", d)
		}
		if n := inner.since(); n != 1 {
			t.Fatalf("inner calls during the flood: %d, want 1 (the other key)", n)
		}
		for range 3 {
			p, err := lim.Peek(ctx, x, 2)
			if err != nil || p.Allowed || p.Remaining != 0 {
				t.Fatalf("peek at 2: %+v, %v; want denied, 0 left", p, err)
			}
		}
		if n := inner.since(); n != 3 {
			t.Fatalf("inner calls for 3 peeks: %d, want 3", n)
		}
		if d := lim.Allow(ctx, x); d.Allowed || d.RetryAfter != 40*time.Second {
			t.Fatalf("remembered denial: %+v, want denied for 40s", d)
		}
		if err := lim.Refund(ctx, first.Ticket()); err != nil {
			t.Fatal(err)
		}
		if d := lim.Allow(ctx, x); !d.Allowed {
			t.Fatalf("after a refund: %+v, want admitted", d)
		}
		clock.Advance(41 * time.Second) // the window rolls
		if d := lim.Allow(ctx, x); !d.Allowed {
			t.Fatalf("next window: %+v, want admitted", d)
		}
	})
}

// TestRecordIntoFullWindow: recording into a fixed window already full (as
// the Envoy API does with a refused hit) keeps its remembered denial, whose
// figures still hold; a record into a window with units left drops it.
func TestRecordIntoFullWindow(t *testing.T) {
	eachBackend(t, func(t *testing.T, st store.Store) {
		clock := clocktest.New(time.Now())
		inner := &counted{Store: st}
		lim := newLimiter(t, "record", overlimit.New(inner, &overlimit.Options{MaxAge: -1}), clock,
			floodgate.Rule{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"user"}})
		x := floodgate.Attributes{"user": "x"}
		if d, _ := lim.AllowN(ctx, x, 3); !d.Allowed {
			t.Fatal("3 units refused")
		}
		if d := lim.Allow(ctx, x); d.Allowed {
			t.Fatal("a 4th unit admitted")
		}
		if _, err := lim.Record(ctx, x, 1); err != nil {
			t.Fatal(err)
		}
		inner.since()
		if d := lim.Allow(ctx, x); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Minute {
			t.Fatalf("after a record into the full window: %+v, want denied for 1m", d)
		}
		if n := inner.since(); n != 0 {
			t.Fatalf("inner calls for the denial after the record: %d, want 0 (still remembered)", n)
		}
		// A denial with a unit left moves with a record: it is dropped.
		y := floodgate.Attributes{"user": "y"}
		if d, _ := lim.AllowN(ctx, y, 2); !d.Allowed {
			t.Fatal("2 units refused")
		}
		if d, _ := lim.AllowN(ctx, y, 2); d.Allowed || d.Remaining != 1 {
			t.Fatalf("a cost of 2 with 1 left: %+v, want denied with 1 left", d)
		}
		if _, err := lim.Record(ctx, y, 1); err != nil {
			t.Fatal(err)
		}
		inner.since()
		if d, _ := lim.AllowN(ctx, y, 2); d.Allowed || d.Remaining != 0 {
			t.Fatalf("after a record of the last unit: %+v, want denied with 0 left", d)
		}
		if n := inner.since(); n != 1 {
			t.Fatalf("inner calls for the denial after the record: %d, want 1 (the store's figures moved)", n)
		}
	})
}

// TestEveryRule: a decision is answered locally only when every one of its
// rules is a remembered denial, and then exactly as the inner store would
// answer it. per-user 1/min and per-tenant 1/h, the tenant spent by
// another user, x already remembered as denied by per-user: {x, t} must not
// come back with per-user's minute (a client honouring it would be refused
// again) and per-tenant "admitted".
func TestEveryRule(t *testing.T) {
	eachBackend(t, func(t *testing.T, st store.Store) {
		clock := clocktest.New(time.Now())
		inner := &counted{Store: st}
		lim := newLimiter(t, "every", overlimit.New(inner, nil), clock,
			floodgate.Rule{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"user"}},
			floodgate.Rule{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"tenant"}})
		x := floodgate.Attributes{"user": "x"}
		xt := floodgate.Attributes{"user": "x", "tenant": "t"}
		if d := lim.Allow(ctx, x); !d.Allowed {
			t.Fatalf("x's unit: %+v", d)
		}
		if d := lim.Allow(ctx, x); d.Allowed || d.RetryAfter != time.Minute {
			t.Fatalf("x again: %+v, want denied for 1m (and remembered)", d)
		}
		if d := lim.Allow(ctx, floodgate.Attributes{"user": "y", "tenant": "t"}); !d.Allowed {
			t.Fatalf("y spends the tenant's unit: %+v", d)
		}
		for step := range 4 {
			if step == 3 {
				inner.since() // both rules are remembered now
			}
			clock.Advance(250 * time.Millisecond)
			wait := time.Hour - time.Duration(step+1)*250*time.Millisecond
			d := must(lim.Decide(ctx, floodgate.ModeConsume, xt, 1))
			if d.Allowed || d.Rule != "per-tenant" || d.RetryAfter != wait {
				t.Fatalf("{x, t} #%d: %+v, want denied by per-tenant for %v", step, d, wait)
			}
			for _, r := range d.Rules {
				want := map[string]time.Duration{"per-user": wait - 59*time.Minute, "per-tenant": wait}[r.Name]
				if r.Allowed || r.Remaining != 0 || r.RetryAfter != want || r.ResetAfter != want {
					t.Fatalf("{x, t} #%d: rule %+v, want denied, 0 left, retry and reset %v", step, r, want)
				}
			}
		}
		if n := inner.since(); n != 0 {
			t.Fatalf("inner calls with every rule remembered: %d, want 0", n)
		}
	})
}

// TestWholeMicros: a remembered denial on the wall clock reports whole
// microseconds, as every decision does.
func TestWholeMicros(t *testing.T) {
	eachBackend(t, func(t *testing.T, st store.Store) {
		inner := &counted{Store: st}
		lim := newLimiter(t, "micros", overlimit.New(inner, nil), nil,
			floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}})
		x := floodgate.Attributes{"user": "x"}
		lim.Allow(ctx, x)
		lim.Allow(ctx, x) // denied, remembered
		inner.since()
		for range 20 {
			d := lim.Allow(ctx, x)
			if d.Allowed || d.RetryAfter%time.Microsecond != 0 || d.ResetAfter%time.Microsecond != 0 {
				t.Fatalf("remembered denial: %+v, want denied with whole microseconds", d)
			}
		}
		if n := inner.since(); n != 0 {
			t.Fatalf("inner calls: %d, want 0 (answered locally)", n)
		}
	})
}

// TestMaxAge: a denial is asked for again once it is MaxAge old, and the
// answer is the same; a refund through another instance is then seen.
func TestMaxAge(t *testing.T) {
	eachBackend(t, func(t *testing.T, st store.Store) {
		clock := clocktest.New(time.Now())
		inner := &counted{Store: st}
		rule := floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}}
		lim := newLimiter(t, "age", overlimit.New(inner, nil), clock, rule) // DefaultMaxAge
		other := newLimiter(t, "age", overlimit.New(st, nil), clock, rule)  // another instance
		x := floodgate.Attributes{"user": "x"}
		first := must(other.Decide(ctx, floodgate.ModeConsume, x, 1))
		lim.Allow(ctx, x) // denied, remembered
		if err := other.Refund(ctx, first.Ticket()); err != nil {
			t.Fatal(err)
		}
		inner.since()
		clock.Advance(overlimit.DefaultMaxAge - time.Microsecond)
		if d := lim.Allow(ctx, x); d.Allowed || inner.since() != 0 {
			t.Fatalf("before MaxAge: %+v, want denied locally (the other instance's refund is not seen)", d)
		}
		clock.Advance(time.Microsecond)
		if d := lim.Allow(ctx, x); !d.Allowed || inner.since() != 1 {
			t.Fatalf("at MaxAge: %+v, want admitted by the inner store", d)
		}
	})
}

// TestOnlyExactFigures: a denial whose remaining units would grow before
// it lifts (a bucket denying 3 with 0 left) is not remembered; one at cost
// 1 is. A remembered denial is dropped when its key is charged.
func TestOnlyExactFigures(t *testing.T) {
	eachBackend(t, func(t *testing.T, st store.Store) {
		clock := clocktest.New(time.Now())
		inner := &counted{Store: st}
		lim := newLimiter(t, "exact", overlimit.New(inner, nil), clock,
			floodgate.Rule{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 10, Burst: 5, Window: time.Second, Key: []string{"user"}},
			floodgate.Rule{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Hour, Key: []string{"org"}})
		bucket, window := floodgate.Attributes{"user": "x"}, floodgate.Attributes{"org": "o"}
		allowN := func(attrs floodgate.Attributes, n int64) floodgate.Decision {
			t.Helper()
			d, err := lim.AllowN(ctx, attrs, n)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		allowN(bucket, 5)
		inner.since()
		for range 2 {
			if d := allowN(bucket, 3); d.Allowed || d.Remaining != 0 {
				t.Fatalf("bucket at 3: %+v, want denied, 0 left", d)
			}
		}
		if n := inner.since(); n != 2 {
			t.Fatalf("inner calls for a denial at 3 with 0 left: %d, want 2 (not remembered)", n)
		}
		for range 2 {
			if d := allowN(bucket, 1); d.Allowed {
				t.Fatalf("bucket at 1: %+v, want denied", d)
			}
		}
		if n := inner.since(); n != 1 {
			t.Fatalf("inner calls for a denial at 1: %d, want 1 (remembered)", n)
		}

		allowN(window, 4)
		allowN(window, 3) // denied with 1 left: stands for costs 2 to 5
		inner.since()
		if d := allowN(window, 5); d.Allowed || d.Remaining != 1 || inner.since() != 0 {
			t.Fatalf("window at 5: %+v, want denied locally, 1 left", d)
		}
		if d := allowN(window, 1); !d.Allowed || inner.since() != 1 {
			t.Fatalf("window at 1: %+v, want admitted by the inner store", d)
		}
		if d := allowN(window, 3); d.Allowed || d.Remaining != 0 || inner.since() != 1 {
			t.Fatalf("window at 3 after a charge: %+v, want denied by the inner store, 0 left", d)
		}
	})
}

// TestSize: a decorator of one denial holds one; a second evicts it.
func TestSize(t *testing.T) {
	clock := clocktest.New(time.Now())
	inner := &counted{Store: openMemory(t)}
	lim := newLimiter(t, "size", overlimit.New(inner, &overlimit.Options{Size: 1}), clock,
		floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}})
	x, y := floodgate.Attributes{"user": "x"}, floodgate.Attributes{"user": "y"}
	lim.Allow(ctx, x)
	lim.Allow(ctx, y)
	lim.Allow(ctx, x) // x remembered
	inner.since()
	for i, attrs := range []floodgate.Attributes{x, y, x, y} {
		if d := lim.Allow(ctx, attrs); d.Allowed {
			t.Fatalf("request %d: %+v, want denied", i, d)
		}
	}
	if n := inner.since(); n != 3 {
		t.Fatalf("inner calls for x, y, x, y with room for one: %d, want 3", n)
	}
}

// TestNoInner: a decorator of nothing answers an error.
func TestNoInner(t *testing.T) {
	err := overlimit.New(nil, nil).Apply(ctx, &store.Batch{Cost: 1})
	if err == nil {
		t.Fatal("Apply over a nil store: no error")
	}
}

// TestSameAnswers drives two limiters with the same rules, clock and
// requests, one on the inner store and one on the decorator over it, and
// requires every answer to be the same: peeks, records, refunds and resets
// in between, costs that do and do not fit, and rules the decorator never
// remembers (shadow, concurrency).
func TestSameAnswers(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv(storetest.SeedEnv), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (set %s to replay)", seed, storetest.SeedEnv)
	rng := rand.New(rand.NewPCG(seed, 0))
	rules := []floodgate.Rule{
		{Name: "fw", Algorithm: floodgate.FixedWindow, Limit: 4, Window: 900 * time.Millisecond, Key: []string{"u"}},
		{Name: "sw", Algorithm: floodgate.SlidingWindow, Limit: 5, Window: 800 * time.Millisecond, Buckets: 8, Key: []string{"u"}},
		{Name: "tb", Algorithm: floodgate.TokenBucket, Limit: 3, Burst: 5, Window: time.Second, Key: []string{"u"}},
		{Name: "gcra", Algorithm: floodgate.GCRA, Limit: 4, Burst: 3, Window: time.Second, Key: []string{"g"}},
		{Name: "conc", Algorithm: floodgate.Concurrency, Limit: 2, Window: time.Second, Key: []string{"c"}},
		{Name: "shadow", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Second, Key: []string{"u"}, Shadow: true},
	}
	costs := []int64{1, 1, 1, 1, 2, 3, 5}
	keys := []string{"a", "b"}
	eachBackend(t, func(t *testing.T, st store.Store) {
		steps := 3000
		if testing.Short() {
			steps = 300
		}
		// One clock for all: a store may assume that time does not go
		// backwards across its keys.
		clock := clocktest.New(time.Now())
		for i := range 12 { // rule sets: one rule each, then random pairs and triples
			set := []floodgate.Rule{rules[i%len(rules)]}
			for j := 0; i >= len(rules) && j < 1+i%2; j++ {
				set = append(set, rules[rng.IntN(len(rules))])
			}
			set = dedup(set)
			name := fmt.Sprint("same", i)
			bare := newLimiter(t, name+"-bare", st, clock, set...)
			inner := &counted{Store: st}
			cached := newLimiter(t, name+"-cached", overlimit.New(inner, nil), clock, set...)
			var consumes int64
			var tickets [][2]floodgate.Ticket
			for step := range steps {
				attrs := floodgate.Attributes{"u": keys[rng.IntN(2)], "g": keys[rng.IntN(2)], "c": keys[rng.IntN(2)]}
				n := costs[rng.IntN(len(costs))]
				var got, want floodgate.Outcome
				var op string
				switch r := rng.IntN(100); {
				case r < 80:
					op = "consume"
					want, _ = bare.Decide(ctx, floodgate.ModeConsume, attrs, n)
					got, _ = cached.Decide(ctx, floodgate.ModeConsume, attrs, n)
					consumes++
					tickets = append(tickets, [2]floodgate.Ticket{want.Ticket(), got.Ticket()})
				case r < 88:
					op = "peek"
					want, _ = bare.Decide(ctx, floodgate.ModePeek, attrs, n)
					got, _ = cached.Decide(ctx, floodgate.ModePeek, attrs, n)
				case r < 92:
					op = "record"
					want, _ = bare.Decide(ctx, floodgate.ModeRecord, attrs, n)
					got, _ = cached.Decide(ctx, floodgate.ModeRecord, attrs, n)
				case r < 97 && len(tickets) > 0:
					op = "refund"
					tk := tickets[rng.IntN(len(tickets))]
					if err := bare.Refund(ctx, tk[0]); err != nil {
						t.Fatal(err)
					}
					if err := cached.Refund(ctx, tk[1]); err != nil {
						t.Fatal(err)
					}
				default:
					op = "reset"
					if err := bare.Reset(ctx, attrs); err != nil {
						t.Fatal(err)
					}
					if err := cached.Reset(ctx, attrs); err != nil {
						t.Fatal(err)
					}
				}
				if g, w := view(&got), view(&want); g != w {
					t.Fatalf("set %d step %d: %s %v n=%d\n got %s\nwant %s", i, step, op, attrs, n, g, w)
				}
				clock.Advance(time.Duration(rng.ExpFloat64() * float64(20*time.Millisecond)).Truncate(time.Microsecond))
			}
			local := consumes - inner.consumes.Load()
			t.Logf("set %d (%d rules): %d of %d consumes answered locally", i, len(set), local, consumes)
			if local == 0 && rememberable(set) {
				t.Errorf("set %d: no consume answered locally: the test shows nothing", i)
			}
		}
	})
}

// rememberable reports whether the decorator may answer decisions of rules
// locally: none is shadow or concurrency.
func rememberable(rules []floodgate.Rule) bool {
	for _, r := range rules {
		if r.Shadow || r.Algorithm == floodgate.Concurrency {
			return false
		}
	}
	return true
}

func dedup(rules []floodgate.Rule) []floodgate.Rule {
	seen := map[string]bool{}
	var out []floodgate.Rule
	for _, r := range rules {
		if !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r)
		}
	}
	return out
}

// view is what a decision answered, rule by rule.
func view(d *floodgate.Outcome) string {
	s := fmt.Sprintf("allowed=%v reason=%v never=%v rule=%s rem=%d reset=%v retry=%v err=%v;",
		d.Allowed, d.Reason, d.Never, d.Rule, d.Remaining, d.ResetAfter, d.RetryAfter, d.Err)
	for _, r := range d.Rules {
		s += fmt.Sprintf(" [%s allowed=%v never=%v rem=%d reset=%v retry=%v]", r.Name, r.Allowed, r.Never, r.Remaining, r.ResetAfter, r.RetryAfter)
	}
	return s
}

// TestNoAllocs: over the memory store, decisions through the decorator
// allocate nothing, answered locally or not.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	st := overlimit.New(openMemory(t), nil)
	denied := newLimiter(t, "denied", st, nil,
		floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}})
	admitted := newLimiter(t, "admitted", st, nil,
		floodgate.Rule{Name: "r", Algorithm: floodgate.TokenBucket, Limit: 1e9, Window: time.Second, Key: []string{"user"}})
	denied.Allow(ctx, floodgate.Attributes{"user": "x"})
	for name, lim := range map[string]*floodgate.Limiter{"denied": denied, "admitted": admitted} {
		lim.Allow(ctx, floodgate.Attributes{"user": "x"})
		if n := testing.AllocsPerRun(100, func() { lim.Allow(ctx, floodgate.Attributes{"user": "x"}) }); n != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", name, n)
		}
	}
}

// must is the outcome of a Decide call that cannot fail.
func must(o floodgate.Outcome, err error) floodgate.Outcome {
	if err != nil {
		panic(err)
	}
	return o
}
