package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// exampleStart is the time the examples' clocks start at.
var exampleStart = time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)

// exampleRoute returns a candidate for an upstream route with a
// requests-per-minute and a tokens-per-minute cap, sliding windows in 1 s
// buckets.
func exampleRoute(st store.Store, clock floodgate.Clock, name string, rpm, tpm int64) gateway.Candidate {
	l, err := floodgate.New(name, st, []floodgate.Rule{
		{Name: "rpm", Algorithm: floodgate.SlidingWindow, Limit: rpm, Window: time.Minute, Key: []string{"route"}},
		{Name: "tpm", Algorithm: floodgate.SlidingWindow, Limit: tpm, Window: time.Minute, Key: []string{"route"}},
	}, &floodgate.Options{Clock: clock})
	if err != nil {
		panic(err)
	}
	return gateway.Candidate{Name: name, Limiter: l, Attrs: floodgate.Attributes{"route": name}}
}

// Routes are tried in order; a capped route is skipped without being
// charged, and when every route is capped the answer carries the earliest
// retry-after among them.
func ExampleSelect() {
	st := memory.New(nil)
	defer st.Close()
	clock := newExampleClock(exampleStart)
	routes := []gateway.Candidate{
		exampleRoute(st, clock, "primary", 2, 100_000),
		exampleRoute(st, clock, "backup", 1, 100_000),
	}
	ctx := context.Background()
	for range 4 {
		sel := gateway.Select(ctx, routes)
		if sel.Allowed {
			fmt.Printf("%s (skipped %d)\n", sel.Name, sel.Capped)
		} else {
			fmt.Printf("all capped, retry after %v; primary hit %v\n", sel.RetryAfter, sel.Attempts[0].Caps)
		}
		clock.Advance(5 * time.Second)
	}
	// Output:
	// primary (skipped 0)
	// primary (skipped 0)
	// backup (skipped 1)
	// all capped, retry after 45s; primary hit [rpm]
}

// A Selector fails over: an attempt that failed upstream is reported and the
// next route is tried. The failed attempt was sent, so it stays counted.
func ExampleSelector() {
	st := memory.New(nil)
	defer st.Close()
	clock := newExampleClock(exampleStart)
	primary := exampleRoute(st, clock, "primary", 10, 100_000)
	backup := exampleRoute(st, clock, "backup", 10, 100_000)
	call := func(route string) error {
		if route == "primary" {
			return errors.New("503 overloaded")
		}
		return nil
	}

	ctx := context.Background()
	sel := gateway.NewSelector([]gateway.Candidate{primary, backup})
	for {
		at, ok := sel.Next(ctx)
		if !ok {
			fmt.Println("no route left")
			break
		}
		if err := call(at.Name); err != nil {
			fmt.Printf("%s failed: %v\n", at.Name, err)
			sel.Failed(err)
			continue
		}
		fmt.Printf("served by %s\n", at.Name)
		break
	}
	res := sel.Result()
	d, _ := primary.Limiter.Peek(ctx, primary.Attrs, 1) // its rule with the fewest left: rpm
	fmt.Printf("sent %d, failed %d; primary has %d requests left\n", res.Sent, res.Failed, d.Remaining)
	// Output:
	// primary failed: 503 overloaded
	// served by backup
	// sent 2, failed 1; primary has 9 requests left
}

// Tokens are known only after the response. Choosing the route charged one
// unit to its token cap; RecordUsage records the rest of the weighted cost into
// the token cap alone, so it ends up charged exactly the cost.
func ExampleRecordUsage() {
	st := memory.New(nil)
	defer st.Close()
	route := exampleRoute(st, newExampleClock(exampleStart), "primary", 60, 100)
	tokens, err := route.Limiter.Only("tpm")
	if err != nil {
		panic(err)
	}
	requests, err := route.Limiter.Only("rpm")
	if err != nil {
		panic(err)
	}
	weights := gateway.Weights{"input": 1, "output": 3}

	ctx := context.Background()
	sel := gateway.Select(ctx, []gateway.Candidate{route})
	cost, err := weights.Cost(gateway.Usage{"input": 2, "output": 3})
	if err != nil {
		panic(err)
	}
	d, _ := gateway.RecordUsage(ctx, tokens, sel.Ticket(), route.Attrs, cost)
	fmt.Printf("cost %d; tokens left %d\n", cost, d.Remaining)
	p, _ := requests.Peek(ctx, route.Attrs, 1)
	fmt.Printf("requests left %d\n", p.Remaining)
	// Output:
	// cost 11; tokens left 89
	// requests left 59
}

// A monthly budget in a time zone: checked read-only before the work,
// recorded after it, and refused until the month ends in that zone once it
// is spent.
func ExampleMonthlyBudget() {
	st := memory.New(nil)
	defer st.Close()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	// 23:00 on January 31 in New York (04:00 UTC on February 1).
	clock := newExampleClock(time.Date(2026, 1, 31, 23, 0, 0, 0, ny))
	budget, err := floodgate.New("spend", st, []floodgate.Rule{
		gateway.MonthlyBudget("monthly", 1000, ny, "tenant"),
	}, &floodgate.Options{Clock: clock, FailurePolicy: floodgate.FailClosed})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	acme := floodgate.Attributes{"tenant": "acme"}

	d, _ := budget.Peek(ctx, acme, 1) // before the work: counts nothing
	fmt.Printf("check: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	budget.Record(ctx, acme, 1200) // after it: the actual spend
	d, _ = budget.Peek(ctx, acme, 1)
	fmt.Printf("check: allowed=%v retry-after=%v\n", d.Allowed, d.RetryAfter)
	clock.Advance(d.RetryAfter)
	d, _ = budget.Peek(ctx, acme, 1)
	fmt.Printf("February: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	// Output:
	// check: allowed=true remaining=1000
	// check: allowed=false retry-after=1h0m0s
	// February: allowed=true remaining=1000
}

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
