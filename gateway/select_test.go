package gateway_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// The gateway tests run as one suite over a store factory: TestGateway runs
// it on the memory store, TestGatewayRedis (select_redis_test.go) on a
// real Redis.

// newStoreFunc returns a fresh store for one test, whose state no other test
// sees.
type newStoreFunc func(t *testing.T) store.Store

func memoryStore(t *testing.T) store.Store {
	s := memory.New(&memory.Options{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestGateway(t *testing.T) { runGateway(t, memoryStore) }

// gw is one gateway test's world: a store and a manual clock.
type gw struct {
	t     *testing.T
	st    store.Store
	clock *clocktest.Manual
	ctx   context.Context
}

func newGW(t *testing.T, newStore newStoreFunc, start time.Time) *gw {
	return &gw{t: t, st: newStore(t), clock: clocktest.New(start), ctx: context.Background()}
}

func (g *gw) limiter(name string, policy floodgate.FailurePolicy, rules ...floodgate.Rule) *floodgate.Limiter {
	g.t.Helper()
	l, err := floodgate.New(name, g.st, rules, &floodgate.Options{
		Clock: g.clock, FailurePolicy: policy, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		g.t.Fatal(err)
	}
	return l
}

// perMinute is a sliding window of limit units a minute in 1 s buckets,
// keyed on attr: the shape of a gateway's RPM and TPM caps.
func perMinute(name string, limit int64, attr string) floodgate.Rule {
	return floodgate.Rule{Name: name, Algorithm: floodgate.SlidingWindow, Limit: limit, Window: time.Minute, Buckets: 60, Key: []string{attr}}
}

// route returns a route limiter with an RPM and a TPM cap, and the
// candidate for it.
func (g *gw) route(name string, rpm, tpm int64) gateway.Candidate {
	l := g.limiter(name, floodgate.FailOpen, perMinute("rpm", rpm, "route"), perMinute("tpm", tpm, "route"))
	return gateway.Candidate{Name: name, Limiter: l, Attrs: floodgate.Attributes{"route": name}}
}

// left returns what each rule of l has left for attrs, by peeks that charge
// nothing. Each rule is read on its own (through Only): a store's
// over-limit cache may answer a peek of the whole limiter from a denied
// rule without reading the others.
func (g *gw) left(l *floodgate.Limiter, attrs floodgate.Attributes) map[string]int64 {
	g.t.Helper()
	out := map[string]int64{}
	for _, r := range l.Rules() {
		one, err := l.Only(r.Name)
		if err != nil {
			g.t.Fatal(err)
		}
		d, err := one.Peek(g.ctx, attrs, 1)
		if err != nil {
			g.t.Fatal(err)
		}
		if d.Reason == floodgate.ReasonStore {
			g.t.Fatalf("peek %s: store failed: %v", l.Name(), d.Err)
		}
		out[r.Name] = d.Remaining
	}
	return out
}

// admit is an admission on l, as an API key's is: the decision and the
// ticket that settles it.
func (g *gw) admit(l *floodgate.Limiter, attrs floodgate.Attributes) (floodgate.Decision, floodgate.Ticket) {
	o, err := l.Decide(g.ctx, floodgate.ModeConsume, attrs, 1)
	if err != nil {
		panic(err)
	}
	return o.Decision, o.Ticket()
}

func (g *gw) wantLeft(l *floodgate.Limiter, attrs floodgate.Attributes, want map[string]int64) {
	g.t.Helper()
	got := g.left(l, attrs)
	for name, w := range want {
		if got[name] != w {
			g.t.Errorf("%s %s: remaining %d, want %d", l.Name(), name, got[name], w)
		}
	}
}

func runGateway(t *testing.T, newStore newStoreFunc) {
	t.Run("SelectSkipsCappedRoute", func(t *testing.T) { testSelectSkipsCapped(t, newStore) })
	t.Run("SelectAllCapped", func(t *testing.T) { testSelectAllCapped(t, newStore) })
	t.Run("SelectFailover", func(t *testing.T) { testSelectFailover(t, newStore) })
	t.Run("SelectConcurrent", func(t *testing.T) { testSelectConcurrent(t, newStore) })
	t.Run("SelectStoreFailure", func(t *testing.T) { testSelectStoreFailure(t, newStore) })
	t.Run("WeightedTokens", func(t *testing.T) { testWeightedTokens(t, newStore) })
	t.Run("CacheHit", func(t *testing.T) { testCacheHit(t, newStore) })
	t.Run("RecordUsageBelowDeposit", func(t *testing.T) { testRecordUsageBelowDeposit(t, newStore) })
	t.Run("BudgetCheckNeverCounts", func(t *testing.T) { testBudgetCheck(t, newStore) })
	t.Run("CalendarBudgets", func(t *testing.T) { testCalendarBudgets(t, newStore) })
	t.Run("RollingBudget", func(t *testing.T) { testRollingBudget(t, newStore) })
}

var gwStart = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

func testSelectSkipsCapped(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	a, b := g.route("a", 2, 1000), g.route("b", 5, 1000)
	routes := []gateway.Candidate{a, b}

	var got []string
	for range 4 {
		sel := gateway.Select(g.ctx, routes)
		if !sel.Allowed {
			t.Fatalf("selection denied: %+v", sel)
		}
		got = append(got, sel.Name)
		g.clock.Advance(time.Second)
	}
	if want := []string{"a", "a", "b", "b"}; !slices.Equal(got, want) {
		t.Fatalf("routes chosen %v, want %v", got, want)
	}

	// a is at its RPM cap: the selections that skipped it left its
	// counters where they were.
	g.wantLeft(a.Limiter, a.Attrs, map[string]int64{"rpm": 0, "tpm": 998})
	sel := gateway.Select(g.ctx, routes)
	if !sel.Allowed || sel.Name != "b" || sel.Capped != 1 {
		t.Fatalf("got %+v, want b after a capped", sel)
	}
	if caps := sel.Attempts[0].Caps; !slices.Equal(caps, []string{"rpm"}) {
		t.Errorf("a's caps hit %v, want [rpm]", caps)
	}
	if sel.RetryAfter != 0 || sel.Attempts[0].Decision.RetryAfter != 56*time.Second {
		t.Errorf("admitted: retry-after %v (a's own %v), want 0 (56s)", sel.RetryAfter, sel.Attempts[0].Decision.RetryAfter)
	}
	g.wantLeft(a.Limiter, a.Attrs, map[string]int64{"rpm": 0, "tpm": 998})
	g.wantLeft(b.Limiter, b.Attrs, map[string]int64{"rpm": 2, "tpm": 997})
}

func testSelectAllCapped(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	a := g.route("a", 1, 1000)
	b := g.route("b", 10, 5)
	routes := []gateway.Candidate{a, b}

	// a's one request at 0s; b's tokens spent at 10s.
	if sel := gateway.Select(g.ctx, routes); sel.Name != "a" {
		t.Fatalf("first selection %+v, want a", sel)
	}
	g.clock.Advance(10 * time.Second)
	bTokens, err := b.Limiter.Only("tpm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bTokens.Record(g.ctx, b.Attrs, 5); err != nil {
		t.Fatal(err)
	}
	g.clock.Advance(10 * time.Second) // now 20s

	before := [2]map[string]int64{g.left(a.Limiter, a.Attrs), g.left(b.Limiter, b.Attrs)}
	sel := gateway.Select(g.ctx, routes)
	if sel.Allowed || sel.Capped != 2 || sel.Sent != 0 {
		t.Fatalf("got %+v, want every route capped", sel)
	}
	// a frees up at 60s, b at 70s: the earliest is a's, 40s from now.
	if got, want := sel.RetryAfter, 40*time.Second; got != want {
		t.Errorf("retry-after %v, want %v", got, want)
	}
	if got := sel.Attempts[0].Caps; !slices.Equal(got, []string{"rpm"}) {
		t.Errorf("a's caps %v, want [rpm]", got)
	}
	if got := sel.Attempts[1].Caps; !slices.Equal(got, []string{"tpm"}) {
		t.Errorf("b's caps %v, want [tpm]", got)
	}
	if got, want := sel.Attempts[1].Decision.RetryAfter, 50*time.Second; got != want {
		t.Errorf("b's retry-after %v, want %v", got, want)
	}
	// Refused candidates' counters did not move.
	g.wantLeft(a.Limiter, a.Attrs, before[0])
	g.wantLeft(b.Limiter, b.Attrs, before[1])

	// The retry-after is exact: a microsecond early is still denied.
	g.clock.Advance(sel.RetryAfter - time.Microsecond)
	if sel := gateway.Select(g.ctx, routes); sel.Allowed {
		t.Fatalf("admitted %s a microsecond before the retry-after", sel.Name)
	}
	g.clock.Advance(time.Microsecond)
	if sel := gateway.Select(g.ctx, routes); !sel.Allowed || sel.Name != "a" {
		t.Fatalf("at the retry-after: %+v, want a", sel)
	}
}

func testSelectConcurrent(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	routes := []gateway.Candidate{g.route("a", 5, 1000), g.route("b", 7, 1000)}
	const callers = 40
	results := make(chan gateway.Selection, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- gateway.Select(g.ctx, routes)
		}()
	}
	wg.Wait()
	close(results)
	served := map[string]int{}
	for sel := range results {
		if sel.Allowed {
			served[sel.Name]++
		} else if sel.RetryAfter != time.Minute {
			t.Errorf("denied with retry-after %v, want 1m", sel.RetryAfter)
		}
	}
	// Each route admits exactly its cap: the check and the count of one
	// candidate are one atomic step.
	if served["a"] != 5 || served["b"] != 7 {
		t.Errorf("served %v, want a:5 b:7", served)
	}
}

var errUpstream = errors.New("upstream: 503 overloaded")

func testSelectFailover(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	a, b, c := g.route("a", 3, 1000), g.route("b", 3, 1000), g.route("c", 3, 1000)
	sel := gateway.NewSelector([]gateway.Candidate{a, b, c})

	at, ok := sel.Next(g.ctx)
	if !ok || at.Name != "a" || !at.Admitted() {
		t.Fatalf("first attempt %+v", at)
	}
	sel.Failed(errUpstream)
	at, ok = sel.Next(g.ctx)
	if !ok || at.Name != "b" {
		t.Fatalf("failover attempt %+v, want b", at)
	}
	res := sel.Result()
	if !res.Allowed || res.Name != "b" || res.Index != 1 || res.Sent != 2 || res.Failed != 1 || res.Capped != 0 {
		t.Fatalf("result %+v", res)
	}
	if !errors.Is(res.Attempts[0].Err, errUpstream) {
		t.Errorf("a's error %v, want %v", res.Attempts[0].Err, errUpstream)
	}
	// The ticket that settles the selection is b's; a's attempt keeps its
	// own.
	if tk := res.Ticket(); !tk.Valid() || tk.Limiter != "b" {
		t.Errorf("the selection's ticket %+v, want b's", tk)
	}
	if tk := res.Attempts[0].Ticket(); !tk.Valid() || tk.Limiter != "a" {
		t.Errorf("a's ticket %+v", tk)
	}
	// The failed attempt was sent, so it counts against a's cap; c was
	// never tried.
	g.wantLeft(a.Limiter, a.Attrs, map[string]int64{"rpm": 2})
	g.wantLeft(b.Limiter, b.Attrs, map[string]int64{"rpm": 2})
	g.wantLeft(c.Limiter, c.Attrs, map[string]int64{"rpm": 3})

	// Every route failing leaves nothing capped: no retry-after, the caller
	// answers with an upstream error.
	sel.Failed(errUpstream)
	if _, ok := sel.Next(g.ctx); !ok {
		t.Fatal("c not tried")
	}
	sel.Failed(errUpstream)
	if at, ok := sel.Next(g.ctx); ok {
		t.Fatalf("attempt %+v past the last candidate", at)
	}
	res = sel.Result()
	if res.Allowed || res.Sent != 3 || res.Failed != 3 || res.Capped != 0 || res.RetryAfter != 0 || res.Never {
		t.Fatalf("all failed: %+v", res)
	}
	if res.Ticket().Valid() {
		t.Error("a selection that admitted nothing has a ticket")
	}
}

func testSelectStoreFailure(t *testing.T, newStore newStoreFunc) {
	g := newGW(t, newStore, gwStart)
	down := &downStore{}
	mk := func(name string, p floodgate.FailurePolicy) gateway.Candidate {
		l, err := floodgate.New(name, down, []floodgate.Rule{perMinute("rpm", 10, "route")},
			&floodgate.Options{Clock: g.clock, FailurePolicy: p, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		return gateway.Candidate{Name: name, Limiter: l, Attrs: floodgate.Attributes{"route": name}}
	}
	healthy := g.route("healthy", 10, 1000)

	sel := gateway.Select(g.ctx, []gateway.Candidate{mk("closed", floodgate.FailClosed), healthy})
	if !sel.Allowed || sel.Name != "healthy" || sel.Capped != 1 {
		t.Fatalf("fail-closed route not skipped: %+v", sel)
	}
	if d := sel.Attempts[0].Decision; d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, errStoreDown) {
		t.Errorf("fail-closed attempt: reason %v err %v", d.Reason, d.Err)
	}
	sel = gateway.Select(g.ctx, []gateway.Candidate{mk("open", floodgate.FailOpen), healthy})
	if !sel.Allowed || sel.Name != "open" || sel.Decision.Reason != floodgate.ReasonStore {
		t.Fatalf("fail-open route not admitted by policy: %+v", sel)
	}
	// Every route fail-closed: denied with the policy's retry-after.
	sel = gateway.Select(g.ctx, []gateway.Candidate{mk("closed2", floodgate.FailClosed)})
	if sel.Allowed || sel.RetryAfter < time.Second {
		t.Fatalf("all fail-closed: %+v", sel)
	}
}

func TestSelectorZero(t *testing.T) {
	var sel gateway.Selector
	sel.Failed(errUpstream) // nothing to mark
	if _, ok := sel.Next(context.Background()); ok {
		t.Fatal("the zero Selector returned a candidate")
	}
	if res := sel.Result(); res.Allowed || res.Index != -1 || res.Capped != 0 || res.RetryAfter != 0 || res.Ticket().Valid() {
		t.Fatalf("the zero Selector's result: %+v", res)
	}
	// A candidate without a limiter has no caps.
	res := gateway.Select(context.Background(), []gateway.Candidate{{Name: "free"}})
	if !res.Allowed || res.Name != "free" {
		t.Fatalf("uncapped candidate: %+v", res)
	}
}

var errStoreDown = errors.New("test store: connection refused")

// downStore is a store that cannot be reached.
type downStore struct{}

func (downStore) Apply(context.Context, *store.Batch) error { return errStoreDown }

// BenchmarkSelect measures a selection on the memory store that skips a
// capped route and admits the next: two decisions.
func BenchmarkSelect(b *testing.B) {
	t := &testing.T{}
	s := memory.New(&memory.Options{SweepInterval: -1})
	defer s.Close()
	g := &gw{t: t, st: s, clock: clocktest.New(gwStart), ctx: context.Background()}
	capped := g.route("capped", 1, 1<<40)
	open := g.route("open", 1<<40, 1<<40)
	gateway.Select(g.ctx, []gateway.Candidate{capped})
	routes := []gateway.Candidate{capped, open}
	b.ReportAllocs()
	for b.Loop() {
		if sel := gateway.Select(g.ctx, routes); sel.Name != "open" {
			b.Fatal(sel.Name)
		}
	}
}

// BenchmarkRecordUsage measures recording a weighted token cost into a route's
// token rule on the memory store.
func BenchmarkRecordUsage(b *testing.B) {
	s := memory.New(&memory.Options{SweepInterval: -1})
	defer s.Close()
	g := &gw{t: &testing.T{}, st: s, clock: clocktest.New(gwStart), ctx: context.Background()}
	r := g.route("r", 1<<40, 1<<40)
	tokens, _ := r.Limiter.Only("tpm")
	ticket := gateway.Select(g.ctx, []gateway.Candidate{r}).Ticket()
	weights := gateway.Weights{"input": 1, "output": 3}
	usage := gateway.Usage{"input": 2, "output": 3}
	b.ReportAllocs()
	for b.Loop() {
		cost, _ := weights.Cost(usage)
		gateway.RecordUsage(g.ctx, tokens, ticket, r.Attrs, cost)
	}
}
