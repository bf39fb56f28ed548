package floodgate_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

// TestReserveKeepsADailyBudget is an LLM gateway's load: a tenant's daily
// budget of 100,000 tokens, 20 concurrent answers, each reserving its
// max_tokens of 8,000 and settling what it used, 1,000 to 8,000, once it
// has streamed; on the memory store and the system clock. The budget is
// never overspent, and is used to within a reservation of its end: the
// callers stop when a reservation is refused while none is under way.
func TestReserveKeepsADailyBudget(t *testing.T) {
	t.Parallel()
	const budget, workers, maxTokens = 100_000, 20, 8_000
	// A zone where it is noon now: the day cannot end during the test.
	now := time.Now().UTC()
	loc := time.FixedZone("noon", 12*3600-(now.Hour()*3600+now.Minute()*60+now.Second()))
	st := memory.New(nil)
	defer st.Close()
	l, err := floodgate.New("gateway", st, []floodgate.Rule{{
		Name: "tokens-per-day", Algorithm: floodgate.FixedWindow, Limit: budget,
		Align: floodgate.AlignDay, Location: loc, Key: []string{"tenant"}, Reservable: true,
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tenant := floodgate.Attributes{"tenant": "acme"}
	var (
		spent, demanded atomic.Int64
		busy            atomic.Int64 // callers between a Reserve and its Settle
		changes         atomic.Int64 // reservations admitted and settled
		quiet           atomic.Bool  // a caller saw the budget refuse with nothing under way
	)
	deadline := time.Now().Add(2500 * time.Millisecond)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(now.UnixNano())))
			for time.Now().Before(deadline) {
				before := changes.Load()
				busy.Add(1)
				o, err := l.Reserve(ctx, tenant, maxTokens, time.Minute)
				if err != nil || o.Err != nil {
					t.Errorf("Reserve: %v %v", err, o.Err)
					busy.Add(-1)
					return
				}
				used := 1000 + rng.Int64N(maxTokens-1000+1)
				demanded.Add(used)
				if !o.Allowed {
					// Refused with nothing under way before or since: the
					// budget left is less than a reservation for good.
					if busy.Add(-1) == 0 && changes.Load() == before {
						quiet.Store(true)
						return
					}
					time.Sleep(200 * time.Microsecond)
					continue
				}
				changes.Add(1)
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond) // the answer streams
				if s, err := l.Settle(ctx, o.Ticket(), used); err != nil || s != floodgate.Settled {
					t.Errorf("Settle(%d) = %v, %v; want settled", used, s, err)
				}
				spent.Add(used)
				changes.Add(1)
				busy.Add(-1)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	d, err := l.Peek(ctx, tenant, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := spent.Load()
	t.Logf("%d tokens demanded, %d spent of %d (%.1f%%), %d left", demanded.Load(), got, budget, 100*float64(got)/budget, d.Remaining)
	switch {
	case demanded.Load() <= budget:
		t.Fatalf("%d tokens demanded: the load did not exceed the budget", demanded.Load())
	case got > budget:
		t.Errorf("%d tokens spent, over the budget of %d", got, budget)
	case d.Remaining != budget-got:
		t.Errorf("the store has %d tokens left, want the budget less what was spent, %d", d.Remaining, budget-got)
	case got < budget*9/10:
		t.Errorf("%d tokens spent, under 90%% of the budget of %d", got, budget)
	case quiet.Load() && got <= budget-maxTokens:
		t.Errorf("a reservation was refused with %d tokens of %d spent and none held", got, budget)
	}
}

func TestReserveErrors(t *testing.T) {
	ctx := context.Background()
	rules := []floodgate.Rule{
		{Name: "budget", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Hour, Key: []string{"tenant"}, Reservable: true},
		okRule(),
	}
	l, _ := memLimiter(t, rules, nil)
	acme := floodgate.Attributes{"tenant": "acme", "user": "u"}
	o, err := l.Reserve(ctx, acme, 10, time.Minute)
	if err != nil || !o.Allowed {
		t.Fatalf("Reserve = %+v, %v; want admitted", o, err)
	}
	reservation := o.Ticket()
	consumed := must(l.Decide(ctx, floodgate.ModeConsume, acme, 1)).Ticket()
	plain, _ := memLimiter(t, []floodgate.Rule{okRule()}, nil)
	other, err := floodgate.New("other", memory.New(&memory.Options{SweepInterval: -1}), rules, nil)
	if err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name string
		err  error
		want string // the message, or "" for want
		is   error
	}{
		{name: "no reservable rule", err: second(plain.Reserve(ctx, acme, 10, time.Minute)),
			want: `floodgate: limiter "test" has no reservable rule to reserve units of`},
		{name: "no units", err: second(l.Reserve(ctx, acme, 0, time.Minute)),
			want: `floodgate: limiter "test": reserved units 0 must be at least 1`},
		{name: "negative units", err: second(l.Reserve(ctx, acme, -5, time.Minute)),
			want: `floodgate: limiter "test": reserved units -5 must be at least 1`},
		{name: "hold under 1ms", err: second(l.Reserve(ctx, acme, 10, time.Millisecond-time.Microsecond)),
			want: `floodgate: limiter "test": hold 999µs must be at least 1ms`},
		{name: "no hold", err: second(l.Reserve(ctx, acme, 10, 0)),
			want: `floodgate: limiter "test": hold 0s must be at least 1ms`},
		{name: "negative usage", err: second(l.Settle(ctx, reservation, -1)),
			want: `floodgate: limiter "test": settled usage -1 must not be negative`},
		{name: "negative usage, oldest", err: second(l.SettleOldest(ctx, acme, -1)),
			want: `floodgate: limiter "test": settled usage -1 must not be negative`},
		{name: "a consume's ticket", err: second(l.Settle(ctx, consumed, 5)), is: floodgate.ErrNotReservation},
		{name: "the zero ticket", err: second(l.Settle(ctx, floodgate.Ticket{}, 5)), is: floodgate.ErrNotReservation},
		{name: "another limiter's reservation", err: second(other.Settle(ctx, reservation, 5)), is: floodgate.ErrForeignTicket},
		{name: "another limiter's release", err: other.Release(ctx, reservation), is: floodgate.ErrForeignTicket},
	} {
		switch {
		case tt.err == nil:
			t.Errorf("%s: no error", tt.name)
		case tt.is != nil && !errors.Is(tt.err, tt.is):
			t.Errorf("%s: error %v, want %v", tt.name, tt.err, tt.is)
		case tt.want != "" && tt.err.Error() != tt.want:
			t.Errorf("%s: error\n  %s\nwant\n  %s", tt.name, tt.err, tt.want)
		}
	}
	// None of them held, charged or ended anything.
	if r := must(l.Decide(ctx, floodgate.ModePeek, acme, 1)).Rules[0]; r.Remaining != 89 {
		t.Errorf("after the errors: %d of the budget left, want 89 (10 held, 1 charged)", r.Remaining)
	}
	if s, err := l.Settle(ctx, reservation, 10); err != nil || s != floodgate.Settled {
		t.Errorf("Settle after the errors = %v, %v; want settled", s, err)
	}
}

// second is the error of a call that returns a value and an error.
func second[T any](_ T, err error) error { return err }
