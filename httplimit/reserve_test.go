package httplimit

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// budgetRules are an LLM route's limits: 100 requests a minute and a
// reservable budget of tokens per client.
func budgetRules(tokens int64) []floodgate.Rule {
	return []floodgate.Rule{
		{Name: "rpm", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Minute, Key: []string{"ip"}},
		{Name: "tokens", Algorithm: floodgate.FixedWindow, Limit: tokens, Window: time.Hour, Align: floodgate.AlignClock, Key: []string{"ip"}, Reservable: true},
	}
}

// maxTokens reserves the request's max_tokens query parameter.
func maxTokens(r *http.Request) int64 {
	n, _ := strconv.ParseInt(r.URL.Query().Get("max_tokens"), 10, 64)
	return n
}

// left peeks at what each rule of lim has left for 127.0.0.1.
func left(t *testing.T, lim *floodgate.Limiter) map[string]int64 {
	t.Helper()
	o, err := lim.Decide(context.Background(), floodgate.ModePeek, floodgate.Attributes{"ip": "127.0.0.1"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range o.Rules {
		out[r.Name] = r.Remaining
	}
	return out
}

// TestReserve: a request holds its max_tokens on the budget while its
// handler runs, so a concurrent one that does not fit beside it is
// refused; when the handler returns the reservation is settled with what
// it reported, and a handler that failed having used nothing gives it all
// back.
func TestReserve(t *testing.T) {
	f := newFixture(t, budgetRules(10_000), nil)
	entered, finish := make(chan struct{}), make(chan struct{})
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o, ok := DecisionFrom(r.Context()); !ok || !o.Ticket().Valid() || o.Ticket().Until.IsZero() {
			t.Errorf("the handler's decision holds no reservation: %+v", o)
		}
		switch r.URL.Path {
		case "/slow":
			entered <- struct{}{}
			<-finish
		case "/fail":
			http.Error(w, "upstream failed", http.StatusBadGateway)
			return
		}
		if !AddCost(r.Context(), 1000) {
			t.Error("AddCost found no middleware")
		}
		io.WriteString(w, "completion")
	})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, Kind: Cost, Reserve: maxTokens, Hold: time.Minute}, llm)

	done := make(chan result)
	go func() { done <- get(t, srv.URL+"/slow?max_tokens=8000") }()
	<-entered
	if got := left(t, f.lim)["tokens"]; got != 2000 {
		t.Errorf("while the first request runs: %d tokens left, want 2000 (8,000 held)", got)
	}
	res := get(t, srv.URL+"/?max_tokens=4000")
	if res.status != 429 || !strings.Contains(res.body, `["tokens"]`) {
		t.Errorf("a request that does not fit beside the held tokens: %d %s, want 429 by tokens", res.status, res.body)
	}
	close(finish)
	if first := <-done; first.status != 200 || first.header.Get(HeaderRateLimit) != `"rpm";r=99;t=60, "tokens";r=2000;t=3600` {
		t.Fatalf("first: %d %q", first.status, first.header.Get(HeaderRateLimit))
	}
	if got := left(t, f.lim); got["tokens"] != 9000 || got["rpm"] != 99 {
		t.Errorf("after the first request: %v, want 9000 tokens (1,000 used) and 99 requests (the refused one charged nothing)", got)
	}
	if res := get(t, srv.URL+"/?max_tokens=4000"); res.status != 200 {
		t.Fatalf("the second request, once the first has settled: %d %s", res.status, res.body)
	}
	if res := get(t, srv.URL+"/fail?max_tokens=4000"); res.status != 502 {
		t.Fatalf("the failing request: %d", res.status)
	}
	if got := left(t, f.lim); got["tokens"] != 8000 || got["rpm"] != 97 {
		t.Errorf("after a request that used 1,000 and one that failed with nothing used: %v, want 8000 tokens and 97 requests", got)
	}
	if res := get(t, srv.URL+"/?max_tokens=20000"); res.status != 429 || res.header.Get(HeaderRetryAfter) != "" {
		t.Errorf("a reservation over the whole budget: %d with Retry-After %q, want 429 and none (it never fits)", res.status, res.header.Get(HeaderRetryAfter))
	}
}

// TestReserveWithConcurrency: an in-flight cap beside a budget: the lease
// is taken with the reservation and released when the handler returns.
func TestReserveWithConcurrency(t *testing.T) {
	rules := append(budgetRules(10_000), floodgate.Rule{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"ip"}})
	f := newFixture(t, rules, nil)
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { AddCost(r.Context(), 500) })
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, Kind: Cost, Reserve: maxTokens, Hold: time.Minute}, llm)
	for i := range 3 {
		if res := get(t, srv.URL+"/?max_tokens=1000"); res.status != 200 {
			t.Fatalf("request %d: %d %s (a lease not released?)", i, res.status, res.body)
		}
	}
	if got := left(t, f.lim); got["tokens"] != 8500 || got["in-flight"] != 1 || got["rpm"] != 97 {
		t.Errorf("after 3 requests of 500 tokens: %v, want 8500 tokens, the lease free, 97 requests", got)
	}
}

// TestReserveKeepsTheBudget is the load of an LLM route: 20 concurrent
// clients, each request reserving its max_tokens of 8,000 and using 1,000
// to 8,000, against a budget of 100,000. The budget is never overspent and
// is used to within a reservation of its end.
func TestReserveKeepsTheBudget(t *testing.T) {
	const budget, clients, most = 100_000, 20, 8_000
	rules := budgetRules(budget)
	rules[0].Limit = 1_000_000 // requests are not what is limited here
	f := newFixture(t, rules, nil)
	var spent atomic.Int64
	llm := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		used, _ := strconv.ParseInt(r.URL.Query().Get("used"), 10, 64)
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // the answer streams
		AddCost(r.Context(), used)
		spent.Add(used)
	})
	srv := f.serve(t, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, Kind: Cost, Reserve: maxTokens, Hold: time.Minute}, llm)
	var (
		demanded atomic.Int64
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Second)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for refused := 0; refused < 50 && time.Now().Before(deadline); {
				used := 1000 + rand.Int64N(most-1000+1)
				demanded.Add(used)
				res := get(t, srv.URL+"/?max_tokens="+strconv.Itoa(most)+"&used="+strconv.FormatInt(used, 10))
				switch res.status {
				case 200:
				case 429:
					refused++
					time.Sleep(time.Millisecond)
				default:
					t.Errorf("status %d: %s", res.status, res.body)
					return
				}
			}
		}()
	}
	wg.Wait()
	got := spent.Load()
	t.Logf("%d tokens demanded, %d spent of %d", demanded.Load(), got, budget)
	switch {
	case demanded.Load() <= budget:
		t.Fatalf("%d tokens demanded: the load did not exceed the budget", demanded.Load())
	case got > budget:
		t.Errorf("%d tokens spent, over the budget of %d", got, budget)
	case got < budget*9/10:
		t.Errorf("%d tokens spent, under 90%% of the budget of %d", got, budget)
	}
	if l := left(t, f.lim)["tokens"]; l != budget-got {
		t.Errorf("the store has %d tokens left, want %d: the budget less what was spent", l, budget-got)
	}
}

// TestReserveErrors: reservations are checked when the middleware is made.
func TestReserveErrors(t *testing.T) {
	ipOnly := map[string]KeyFunc{"ip": ClientIP(nil)}
	budget := newFixture(t, budgetRules(100), nil)
	plain := newFixture(t, perIP(1, time.Second), nil)
	for _, tt := range []struct {
		lim  *floodgate.Limiter
		opts *Options
		want string
	}{
		{budget.lim, &Options{Attributes: ipOnly, Reserve: maxTokens}, "Reserve needs a Hold"},
		{budget.lim, &Options{Attributes: ipOnly, Hold: time.Minute}, "only Reserve makes"},
		{budget.lim, &Options{Attributes: ipOnly, Reserve: maxTokens, Hold: time.Minute, Count: CountFailures}, "cannot be combined with Count"},
		{budget.lim, &Options{Attributes: ipOnly, Reserve: maxTokens, Hold: time.Minute, ChargeAfter: true}, "cannot be combined with ChargeAfter"},
		{budget.lim, &Options{Attributes: ipOnly, Reserve: maxTokens, Hold: time.Microsecond}, "must be at least 1ms"},
		{plain.lim, &Options{Attributes: ipOnly, Reserve: maxTokens, Hold: time.Minute}, "need a reservable rule"},
	} {
		_, err := New(tt.lim, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New: %v, want an error containing %q", err, tt.want)
		}
	}
}
