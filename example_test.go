package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/memory"
)

// exampleStart is the time the examples' clocks start at.
var exampleStart = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// exampleClock is a Clock that moves only when Advance moves it, so the
// examples' output is exact; a real limiter leaves Options.Clock nil and
// reads the system clock.
type exampleClock struct{ ns atomic.Int64 }

func newExampleClock(t time.Time) *exampleClock {
	c := &exampleClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *exampleClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *exampleClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Three requests a minute per user.
func Example() {
	store := memory.New(nil)
	defer store.Close()
	clock := newExampleClock(exampleStart)
	limiter, err := floodgate.New("api", store, []floodgate.Rule{{
		Name:      "per-user",
		Algorithm: floodgate.FixedWindow,
		Limit:     3,
		Window:    time.Minute,
		Key:       []string{"user"},
	}}, &floodgate.Options{Clock: clock})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	for range 3 {
		d := limiter.AllowKey(ctx, "alice")
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
		clock.Advance(10 * time.Second)
	}
	// The rule keys on "user" alone, so AllowKey's key is the user:
	// Allow with that attribute counts against the same three.
	d := limiter.Allow(ctx, floodgate.Attributes{"user": "alice"})
	fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	// Bob has his own three.
	d = limiter.AllowKey(ctx, "bob")
	fmt.Printf("bob: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// allowed=true remaining=2 retry-after=0s
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=30s
	// bob: allowed=true remaining=2
}

// Rules are ANDed, and a denied request charges no rule: here the tenant's
// limit stops a request that the user's limit would admit, and the user's
// count does not move.
func Example_multipleRules() {
	store := memory.New(nil)
	defer store.Close()
	limiter, err := floodgate.New("api", store, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 2, Window: time.Second, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.SlidingWindow, Limit: 3, Window: time.Minute, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.GCRA, Limit: 1000, Window: time.Second},
	}, &floodgate.Options{Clock: newExampleClock(exampleStart)})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	for _, u := range []string{"ann", "ann", "bea", "bea"} {
		d := must(limiter.Decide(ctx, floodgate.ModeConsume, floodgate.Attributes{"user": u, "tenant": "acme"}, 1))
		fmt.Printf("%s: allowed=%v binding=%s", u, d.Allowed, d.Rule)
		for _, r := range d.Rules {
			fmt.Printf(" %s=%d", r.Name, r.Remaining)
		}
		fmt.Println()
	}
	// Output:
	// ann: allowed=true binding=per-user per-user=1 per-tenant=2 global=999
	// ann: allowed=true binding=per-user per-user=0 per-tenant=1 global=998
	// bea: allowed=true binding=per-tenant per-user=1 per-tenant=0 global=997
	// bea: allowed=false binding=per-tenant per-user=1 per-tenant=0 global=997
}

// A cost counts several units at once; a cost of 0 peeks without charging;
// Record adds usage known only after the work is done, even past the limit.
func ExampleLimiter_AllowN() {
	store := memory.New(nil)
	defer store.Close()
	limiter, err := floodgate.New("llm", store, []floodgate.Rule{{
		Name:      "tokens-per-minute",
		Algorithm: floodgate.TokenBucket,
		Limit:     6000, // refilled at 100 tokens a second
		Window:    time.Minute,
		Key:       []string{"team"},
	}}, &floodgate.Options{Clock: newExampleClock(exampleStart)})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	team := floodgate.Attributes{"team": "search"}
	// Reserve the prompt's tokens before the call.
	d, _ := limiter.AllowN(ctx, team, 2500)
	fmt.Printf("prompt: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Peek: would one more unit pass? Nothing is charged.
	d, _ = limiter.AllowN(ctx, team, 0)
	fmt.Printf("peek: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// The completion turned out long: record it after the fact.
	d, _ = limiter.Record(ctx, team, 4000)
	fmt.Printf("record: allowed=%v retry-after=%v\n", d.Allowed, d.RetryAfter)
	// A cost no bucket of 6000 can ever hold is refused for good.
	d, _ = limiter.AllowN(ctx, team, 7000)
	fmt.Printf("huge: allowed=%v never=%v retry-after=%v\n", d.Allowed, d.Never, d.RetryAfter)
	// Output:
	// prompt: allowed=true remaining=3500
	// peek: allowed=true remaining=3500
	// record: allowed=false retry-after=5.01s
	// huge: allowed=false never=true retry-after=0s
}

// A login limit that counts only failed attempts: every attempt is
// admitted against the limit first, and a successful login refunds its
// ticket.
func ExampleLimiter_Refund() {
	store := memory.New(nil)
	defer store.Close()
	limiter, err := floodgate.New("login", store, []floodgate.Rule{{
		Name:      "failures",
		Algorithm: floodgate.FixedWindow,
		Limit:     3,
		Window:    15 * time.Minute,
		Key:       []string{"account"},
	}}, &floodgate.Options{Clock: newExampleClock(exampleStart), FailurePolicy: floodgate.FailClosed})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	account := floodgate.Attributes{"account": "ann@example.com"}
	for _, passwordOK := range []bool{false, true, true, false} {
		d := must(limiter.Decide(ctx, floodgate.ModeConsume, account, 1))
		if !d.Allowed {
			fmt.Println("locked out")
			continue
		}
		if passwordOK {
			_ = limiter.Refund(ctx, d.Ticket()) // a refund never fails the caller
		}
		d, _ = limiter.Decide(ctx, floodgate.ModeConsume, account, 0)
		fmt.Printf("password ok=%v, failures left: %d\n", passwordOK, d.Remaining)
	}
	// Output:
	// password ok=false, failures left: 2
	// password ok=true, failures left: 2
	// password ok=true, failures left: 2
	// password ok=false, failures left: 1
}

// Reserve the largest cost a request may have, then give back what it did
// not use: a token budget spent exactly, with no ticket to keep.
func ExampleLimiter_GiveBack() {
	store := memory.New(nil)
	defer store.Close()
	limiter, err := floodgate.New("llm", store, []floodgate.Rule{{
		Name:      "tokens-per-hour",
		Algorithm: floodgate.FixedWindow,
		Align:     floodgate.AlignClock,
		Limit:     10_000,
		Window:    time.Hour,
		Key:       []string{"user"},
	}}, &floodgate.Options{Clock: newExampleClock(exampleStart)})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	user := floodgate.Attributes{"user": "u1"}
	d, _ := limiter.AllowN(ctx, user, 4000) // the largest response allowed
	fmt.Println("reserved:", d.Allowed, d.Remaining, "left")
	used := int64(1000)
	_ = limiter.GiveBack(ctx, user, 4000-used) // a give-back never fails the caller
	d, _ = limiter.Peek(ctx, user, 1)
	fmt.Println("after the response:", d.Remaining, "left")
	// Output:
	// reserved: true 6000 left
	// after the response: 9000 left
}

// A tenant's daily token budget kept exactly: reserve the most an LLM
// answer may cost before it starts, settle with what it used once it is
// done. Concurrent answers never spend more than the budget, and a
// reservation its process never settles is given back when its hold ends.
func ExampleLimiter_Reserve() {
	store := memory.New(nil)
	defer store.Close()
	clock := newExampleClock(exampleStart)
	limiter, err := floodgate.New("llm", store, []floodgate.Rule{{
		Name:       "tokens-per-day",
		Algorithm:  floodgate.FixedWindow,
		Align:      floodgate.AlignDay,
		Limit:      100_000,
		Key:        []string{"tenant"},
		Reservable: true,
	}}, &floodgate.Options{Clock: clock})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	tenant := floodgate.Attributes{"tenant": "acme"}
	// max_tokens, held for as long as an answer may stream.
	o, err := limiter.Reserve(ctx, tenant, 8000, 5*time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("reserved:", o.Allowed, o.Remaining, "left")
	s, _ := limiter.Settle(ctx, o.Ticket(), 2500) // the answer used 2,500 tokens
	d, _ := limiter.Peek(ctx, tenant, 1)
	fmt.Printf("%v: %d left\n", s, d.Remaining)

	// A process that dies mid-answer never settles; its hold ends.
	_, _ = limiter.Reserve(ctx, tenant, 8000, 5*time.Minute)
	d, _ = limiter.Peek(ctx, tenant, 1)
	fmt.Println("held by a dead process:", d.Remaining, "left")
	clock.Advance(5 * time.Minute)
	d, _ = limiter.Peek(ctx, tenant, 1)
	fmt.Println("its hold ended:", d.Remaining, "left")
	// Output:
	// reserved: true 92000 left
	// settled: 97500 left
	// held by a dead process: 89500 left
	// its hold ended: 97500 left
}

// A shadow rule runs dark: it counts and reports what it would have
// decided, but never denies.
func ExampleRule_shadow() {
	store := memory.New(nil)
	defer store.Close()
	limiter, err := floodgate.New("api", store, []floodgate.Rule{
		{Name: "current", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}},
		{Name: "proposed", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"}, Shadow: true},
	}, &floodgate.Options{Clock: newExampleClock(exampleStart)})
	if err != nil {
		panic(err)
	}

	ctx := context.Background()
	for range 3 {
		d := must(limiter.Decide(ctx, floodgate.ModeConsume, floodgate.Attributes{"user": "ann"}, 1))
		proposed := d.Rules[1]
		fmt.Printf("allowed=%v shadow-denied=%v proposed: allowed=%v shadow=%v\n",
			d.Allowed, d.ShadowDenied, proposed.Allowed, proposed.Shadow)
	}
	// Output:
	// allowed=true shadow-denied=false proposed: allowed=true shadow=true
	// allowed=true shadow-denied=false proposed: allowed=true shadow=true
	// allowed=true shadow-denied=true proposed: allowed=false shadow=true
}

// unreachableStore stands for a remote store that is down.
type unreachableStore struct{}

func (unreachableStore) Apply(context.Context, *store.Batch) error {
	return errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

// When the store cannot answer, the failure policy decides: open admits,
// closed denies, and either way the decision says the store was the reason.
// A remote store goes under a guard (store/guard): a deadline on every
// call, and after repeated failures a circuit breaker that answers at once.
func ExampleFailurePolicy() {
	ctx := context.Background()
	for _, policy := range []floodgate.FailurePolicy{floodgate.FailOpen, floodgate.FailClosed} {
		clock := newExampleClock(exampleStart)
		guarded, err := guard.New(unreachableStore{}, &guard.Options{
			Timeout: 20 * time.Millisecond,
			Breaker: store.BreakerOptions{Failures: 2, Cooldown: 5 * time.Second},
			Clock:   clock,
			Logger:  slog.New(slog.DiscardHandler),
		})
		if err != nil {
			panic(err)
		}
		limiter, err := floodgate.New("api", guarded, []floodgate.Rule{
			{Name: "per-user", Algorithm: floodgate.GCRA, Limit: 10, Window: time.Second, Key: []string{"user"}},
		}, &floodgate.Options{Clock: clock, FailurePolicy: policy, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			panic(err)
		}
		for range 3 {
			d := limiter.Allow(ctx, floodgate.Attributes{"user": "ann"})
			fmt.Printf("%s: allowed=%v reason=%s retry-after=%v err=%v\n", policy, d.Allowed, d.Reason, d.RetryAfter, d.Err)
		}
		fmt.Println("breaker:", guarded.State())
	}
	// Output:
	// open: allowed=true reason=store retry-after=0s err=dial tcp 10.0.0.7:6379: connection refused
	// open: allowed=true reason=store retry-after=0s err=dial tcp 10.0.0.7:6379: connection refused
	// open: allowed=true reason=store retry-after=0s err=store circuit breaker open
	// breaker: open
	// closed: allowed=false reason=store retry-after=1s err=dial tcp 10.0.0.7:6379: connection refused
	// closed: allowed=false reason=store retry-after=5s err=dial tcp 10.0.0.7:6379: connection refused
	// closed: allowed=false reason=store retry-after=5s err=store circuit breaker open
	// breaker: open
}

// An Observer is told of each decision, by value, with each rule's part in
// it: here it counts every rule's denials per key. (The topkeys package
// keeps such counts in bounded memory.)
func ExampleObserver() {
	store := memory.New(nil)
	defer store.Close()
	denials := map[string]int{}
	limiter, err := floodgate.New("api", store, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Minute, Key: []string{"tenant"}},
	}, &floodgate.Options{
		Clock: newExampleClock(exampleStart),
		Observer: func(_ context.Context, e floodgate.Event) {
			for _, r := range e.Rules() {
				if r.Denied {
					denials[r.Rule+" "+r.Key]++
				}
			}
		},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, user := range []string{"alice", "alice", "alice", "bob", "bob"} {
		limiter.Allow(ctx, floodgate.Attributes{"user": user, "tenant": "acme"})
	}
	fmt.Println(denials)
	// Output:
	// map[per-tenant acme:1 per-user alice:1]
}
