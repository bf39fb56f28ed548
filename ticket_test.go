package floodgate_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store/memory"
)

func TestRefundAtMostOnce(t *testing.T) {
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l, _ := memLimiter(t, []floodgate.Rule{
				{Name: "r", Algorithm: alg, Limit: 3, Window: time.Minute, Key: []string{"user"}},
			}, nil)
			first := must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
			l.Allow(ctx, user("a"))
			tk := first.Ticket()
			if !tk.Valid() || tk.Limiter != "test" || tk.Cost != 1 || len(tk.Entries) != 1 {
				t.Fatalf("ticket = %+v, want a valid one-entry ticket of cost 1", tk)
			}
			copied := cloneTicket(t, tk)
			for i := range 3 {
				if err := l.Refund(ctx, tk); err != nil {
					t.Fatalf("refund %d: %v", i+1, err)
				}
				if d := peek(t, l, user("a")); d.Remaining != 2 {
					t.Fatalf("after refund %d: Remaining = %d, want 2 (one unit back, once)", i+1, d.Remaining)
				}
			}
			// A copy that went through MarshalBinary is the same ticket.
			if err := l.Refund(ctx, copied); err != nil {
				t.Fatal(err)
			}
			if d := peek(t, l, user("a")); d.Remaining != 2 {
				t.Errorf("after refunding a decoded copy: Remaining = %d, want 2", d.Remaining)
			}
		})
	}
}

func TestRefundAfterTheWindowRolled(t *testing.T) {
	ctx := context.Background()
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			l, clock := memLimiter(t, []floodgate.Rule{
				{Name: "r", Algorithm: alg, Limit: 3, Window: time.Minute, Key: []string{"user"}},
			}, nil)
			first := must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
			old := first.Ticket()
			clock.Advance(time.Minute)
			if d := l.Allow(ctx, user("a")); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("in the next window: Allowed=%v Remaining=%d, want true, 2", d.Allowed, d.Remaining)
			}
			if err := l.Refund(ctx, old); err != nil {
				t.Fatal(err)
			}
			if d := peek(t, l, user("a")); d.Remaining != 2 {
				t.Errorf("a refund of the previous window changed the current one: Remaining = %d, want 2", d.Remaining)
			}
		})
	}
	t.Run("token_bucket is capped at capacity", func(t *testing.T) {
		l, clock := memLimiter(t, []floodgate.Rule{
			{Name: "r", Algorithm: floodgate.TokenBucket, Limit: 3, Window: time.Minute, Key: []string{"user"}},
		}, nil)
		d, _ := l.Decide(ctx, floodgate.ModeConsume, user("a"), 3)
		clock.Advance(time.Minute) // full again
		if err := l.Refund(ctx, d.Ticket()); err != nil {
			t.Fatal(err)
		}
		if d := peek(t, l, user("a")); d.Remaining != 3 {
			t.Errorf("Remaining = %d after refunding into a full bucket, want the capacity 3", d.Remaining)
		}
	})
}

func TestRefundReleasesAConcurrencyLease(t *testing.T) {
	ctx := context.Background()
	l, clock := memLimiter(t, []floodgate.Rule{
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: 2, Window: time.Minute, Key: []string{"user"}},
	}, nil)
	a := must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
	clock.Advance(time.Second)
	l.Allow(ctx, user("a"))
	d := l.Allow(ctx, user("a"))
	if d.Allowed || d.RetryAfter != 59*time.Second {
		t.Fatalf("third lease: Allowed=%v RetryAfter=%v, want false, 59s (when the first lapses)", d.Allowed, d.RetryAfter)
	}
	if err := l.Refund(ctx, a.Ticket()); err != nil {
		t.Fatal(err)
	}
	if d := l.Allow(ctx, user("a")); !d.Allowed || d.Remaining != 0 {
		t.Errorf("after releasing a lease: Allowed=%v Remaining=%d, want true, 0", d.Allowed, d.Remaining)
	}
}

// LeaseTicket holds only the Concurrency part of a decision: refunding it
// releases the lease and leaves the other rules charged.
func TestLeaseTicket(t *testing.T) {
	ctx := context.Background()
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "per-minute", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}},
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"user"}},
	}, nil)
	d := must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
	lt := d.LeaseTicket()
	if !lt.Valid() || len(lt.Entries) != 1 || lt.Entries[0].Rule != "in-flight" {
		t.Fatalf("lease ticket = %+v, want the in-flight entry alone", lt)
	}
	if d := l.Allow(ctx, user("a")); d.Allowed || d.Rule != "in-flight" {
		t.Fatalf("second request while the lease is held: %+v", d)
	}
	if err := l.Refund(ctx, lt); err != nil {
		t.Fatal(err)
	}
	d = must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
	if !d.Allowed {
		t.Fatalf("after releasing the lease: %+v, want admitted", d)
	}
	for _, r := range d.Rules {
		if r.Name == "per-minute" && r.Remaining != 8 {
			t.Errorf("per-minute remaining = %d, want 8: the lease ticket gave back more than the lease", r.Remaining)
		}
	}
	// A limiter without Concurrency rules, admitted or denied: the zero
	// ticket.
	only, _ := memLimiter(t, []floodgate.Rule{
		{Name: "per-minute", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute, Key: []string{"user"}},
	}, nil)
	if lt := must(only.Decide(ctx, floodgate.ModeConsume, user("b"), 1)).LeaseTicket(); lt.Valid() {
		t.Errorf("a decision without leases gave a lease ticket %+v", lt)
	}
	if lt := must(only.Decide(ctx, floodgate.ModeConsume, user("b"), 1)).LeaseTicket(); lt.Valid() {
		t.Errorf("a denied decision gave a lease ticket %+v", lt)
	}
}

func TestRefundOfForeignAndEmptyTickets(t *testing.T) {
	ctx := context.Background()
	store := memory.New(&memory.Options{SweepInterval: -1})
	defer store.Close()
	clock := clocktest.New(epoch)
	newLimiter := func(name string, rules ...floodgate.Rule) *floodgate.Limiter {
		l, err := floodgate.New(name, store, rules, &floodgate.Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	r1 := floodgate.Rule{Name: "r1", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"user"}}
	r2 := floodgate.Rule{Name: "r2", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"user"}}
	a, b := newLimiter("a", r1, r2), newLimiter("b", r1, r2)

	issued := must(a.Decide(ctx, floodgate.ModeConsume, user("u"), 1))
	tk := issued.Ticket()
	if err := b.Refund(ctx, tk); !errors.Is(err, floodgate.ErrForeignTicket) {
		t.Errorf("refund on another limiter = %v, want ErrForeignTicket", err)
	}
	if d := peek(t, a, user("u")); d.Remaining != 4 {
		t.Errorf("a foreign refund changed the issuer's state: Remaining = %d, want 4", d.Remaining)
	}
	if err := a.Refund(ctx, floodgate.Ticket{}); err != nil {
		t.Errorf("refund of the zero ticket = %v, want nil", err)
	}
	denied, _ := a.Decide(ctx, floodgate.ModeConsume, user("u"), 50)
	if denied.Ticket().Valid() {
		t.Error("a denied decision returned a valid ticket")
	}

	// The same limiter rebuilt without r2 (a reload, taking over from a)
	// gives back only what r1 took.
	smaller, err := floodgate.New("a", store, []floodgate.Rule{r1}, &floodgate.Options{Clock: clock, Replaces: a})
	if err != nil {
		t.Fatal(err)
	}
	if err := smaller.Refund(ctx, tk); err != nil {
		t.Fatal(err)
	}
	d := peek(t, a, user("u"))
	if r := ruleResult(t, &d, "r1"); r.Remaining != 5 {
		t.Errorf("r1 Remaining = %d, want 5 (refunded)", r.Remaining)
	}
	if r := ruleResult(t, &d, "r2"); r.Remaining != 4 {
		t.Errorf("r2 Remaining = %d, want 4 (its rule is gone from the refunding limiter)", r.Remaining)
	}
}

func TestTicketBinaryRoundTrip(t *testing.T) {
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Minute, Key: []string{"user"}},
		{Name: "per-pair", Algorithm: floodgate.SlidingWindow, Limit: 5, Window: time.Minute, Key: []string{"tenant", "user"}},
		{Name: "leases", Algorithm: floodgate.Concurrency, Limit: 5, Window: time.Minute},
	}, nil)
	d, _ := l.Decide(context.Background(), floodgate.ModeConsume, floodgate.Attributes{"user": `a:b\c`, "tenant": "t"}, 2)
	tk := d.Ticket()
	got := cloneTicket(t, tk)
	if !reflect.DeepEqual(got, tk) {
		t.Errorf("round trip\n got %+v\nwant %+v", got, tk)
	}
	for _, tk := range []floodgate.Ticket{{}, {Limiter: "x", ID: 1<<64 - 1, Cost: 1 << 62, Entries: []floodgate.TicketEntry{{Rule: "r", Key: "", Stamp: -1 << 63}}}} {
		if got := cloneTicket(t, tk); !reflect.DeepEqual(got, tk) {
			t.Errorf("round trip\n got %+v\nwant %+v", got, tk)
		}
	}
}

func TestTicketUnmarshalRejectsMalformedInput(t *testing.T) {
	valid, _ := floodgate.Ticket{Limiter: "api", ID: 7, Cost: 2, Entries: []floodgate.TicketEntry{
		{Rule: "r1", Key: "alice", Stamp: 1_700_000_000_000_000},
		{Rule: "r2", Key: "t:alice", Stamp: 0},
	}}.MarshalBinary()
	bad := map[string][]byte{
		"empty":          nil,
		"wrong version":  append([]byte{1}, valid[1:]...),
		"trailing bytes": append(bytes.Clone(valid), 0),
		"negative cost":  encodeRawTicket(-1, 0),
		"65 entries":     encodeRawTicket(1, 65),
		"huge count":     encodeRawTicket(1, 1<<40),
	}
	for i := range len(valid) {
		bad[fmt.Sprintf("truncated to %d bytes", i)] = valid[:i]
	}
	sentinel := floodgate.Ticket{Limiter: "untouched"}
	for name, b := range bad {
		tk := sentinel
		if err := tk.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: UnmarshalBinary(%x) succeeded with %+v", name, b, tk)
		}
		if !reflect.DeepEqual(tk, sentinel) {
			t.Errorf("%s: a failed UnmarshalBinary changed the ticket to %+v", name, tk)
		}
	}
}

// encodeRawTicket encodes a ticket header with any cost and entry count,
// followed by no entries.
func encodeRawTicket(cost int64, entries uint64) []byte {
	b := []byte{2, 1, 'x', 1}
	b = binary.AppendVarint(b, cost)
	b = binary.AppendVarint(b, 0) // until: not a reservation's
	return binary.AppendUvarint(b, entries)
}

// cloneTicket returns tk after a trip through its binary encoding.
func cloneTicket(t testing.TB, tk floodgate.Ticket) floodgate.Ticket {
	t.Helper()
	b, err := tk.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var out floodgate.Ticket
	if err := out.UnmarshalBinary(b); err != nil {
		t.Fatalf("UnmarshalBinary(MarshalBinary(%+v)): %v", tk, err)
	}
	return out
}

func FuzzTicketUnmarshal(f *testing.F) {
	for _, tk := range []floodgate.Ticket{
		{},
		{Limiter: "api", ID: 42, Cost: 1, Entries: []floodgate.TicketEntry{{Rule: "per-user", Key: "alice", Stamp: 1}}},
		{Limiter: "a", ID: 1<<64 - 1, Cost: 1 << 40, Entries: []floodgate.TicketEntry{{Rule: "r", Key: `x\:y`}, {Rule: "s", Stamp: -5}}},
	} {
		b, _ := tk.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{2, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		var tk floodgate.Ticket
		if err := tk.UnmarshalBinary(b); err != nil {
			return
		}
		if tk.Cost < 0 || len(tk.Entries) > 64 {
			t.Fatalf("accepted %x as %+v", b, tk)
		}
		again := cloneTicket(t, tk)
		if !reflect.DeepEqual(again, tk) {
			t.Fatalf("decoded %+v, which round-trips to %+v", tk, again)
		}
	})
}

func TestConcurrentRefundsOfOneTicketApplyOnce(t *testing.T) {
	ctx := context.Background()
	for _, alg := range allAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			l, _ := memLimiter(t, []floodgate.Rule{
				{Name: "r", Algorithm: alg, Limit: 10, Window: time.Hour, Key: []string{"user"}},
			}, nil)
			d, _ := l.Decide(ctx, floodgate.ModeConsume, user("a"), 4)
			l.AllowN(ctx, user("a"), 4)
			tk := d.Ticket()
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					if err := l.Refund(ctx, tk); err != nil {
						t.Error(err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if got := peek(t, l, user("a")).Remaining; got != 6 {
				t.Errorf("after 64 concurrent refunds of one 4-unit ticket: Remaining = %d, want 2 + 4 = 6", got)
			}
		})
	}
}

// TestConcurrencyLeasesUnderContention has goroutines take and release
// leases in a loop and checks that the holders never outnumber the limit.
func TestConcurrencyLeasesUnderContention(t *testing.T) {
	const limit, goroutines, rounds = 4, 32, 50
	ctx := context.Background()
	l, _ := memLimiter(t, []floodgate.Rule{
		{Name: "in-flight", Algorithm: floodgate.Concurrency, Limit: limit, Window: time.Hour, Key: []string{"user"}},
	}, nil)
	var holders, maxHolders, admitted atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				d := must(l.Decide(ctx, floodgate.ModeConsume, user("a"), 1))
				if !d.Allowed {
					continue
				}
				admitted.Add(1)
				n := holders.Add(1)
				for {
					m := maxHolders.Load()
					if n <= m || maxHolders.CompareAndSwap(m, n) {
						break
					}
				}
				holders.Add(-1) // stop holding before the lease is released
				if err := l.Refund(ctx, d.Ticket()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if m := maxHolders.Load(); m > limit {
		t.Errorf("%d leases held at once, over the limit of %d", m, limit)
	}
	if admitted.Load() < limit {
		t.Errorf("only %d leases were ever granted", admitted.Load())
	}
	if got := peek(t, l, user("a")).Remaining; got != limit {
		t.Errorf("after every lease was released Remaining = %d, want %d", got, limit)
	}
}

// A reservation's ticket keeps when its holds lapse through its encoding.
func TestReservationTicketEncoding(t *testing.T) {
	tk := floodgate.Ticket{Limiter: "llm", ID: 9, Cost: 8000, Until: time.UnixMicro(1_700_000_600_000_000),
		Entries: []floodgate.TicketEntry{{Rule: "tokens-per-day", Key: "acme", Stamp: 1_699_920_000_000_000}}}
	if got := cloneTicket(t, tk); !got.Until.Equal(tk.Until) || got.Cost != 8000 || got.Entries[0] != tk.Entries[0] {
		t.Errorf("round trip = %+v, want %+v", got, tk)
	}
	plain := tk
	plain.Until = time.Time{}
	if got := cloneTicket(t, plain); !got.Until.IsZero() {
		t.Errorf("a refund's ticket came back with Until %v", got.Until)
	}
}
