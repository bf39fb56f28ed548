package storetest

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// Reservations in the random sequences: a harness whose limiter has a
// reservable rule reserves, settles, releases and settles the oldest hold
// among its other steps, and compares every answer with the model.

// reservable reports whether a rule of the harness is reservable, and the
// shortest window among those that are (µs).
func (h *harness) reservable() (ok bool, window int64) {
	for _, s := range h.specs {
		if s.holds && (!ok || s.window < window) {
			ok, window = true, s.window
		}
	}
	return ok, window
}

// stepReservation plays one random reservation step; most is the largest
// capacity among the request's rules.
func (h *harness) stepReservation(attrs floodgate.Attributes, keys []string, most int64) {
	h.t.Helper()
	switch r := h.rng.IntN(100); {
	case r < 40:
		_, w := h.reservable()
		hold := 1000 + h.rng.Int64N(w) // often lapsing by its time, ...
		if h.rng.IntN(3) == 0 {
			hold = w + h.rng.Int64N(2*w) // ... or with its window
		}
		units := 1 + h.rng.Int64N(most+1) // now and then more than any rule admits
		if h.rng.IntN(2) == 0 {
			units = 1 + h.rng.Int64N(max(1, most/3))
		}
		h.reserve(attrs, keys, units, hold)
	case r < 65:
		h.settle(false)
	case r < 75:
		h.settle(true)
	default:
		h.settleOldest(attrs, keys, h.rng.Int64N(most+1))
	}
}

// reserve reserves units for hold µs and compares the answer and its
// ticket with the model's.
func (h *harness) reserve(attrs floodgate.Attributes, keys []string, units, hold int64) floodgate.Outcome {
	h.t.Helper()
	h.logf("reserve %v units=%d hold=%dµs", attrs, units, hold)
	got, err := h.lim.Reserve(h.ctx, attrs, units, time.Duration(hold)*time.Microsecond)
	if err != nil {
		h.fail("Reserve(%d, %dµs): %v", units, hold, err)
	}
	now := h.now()
	want := h.model.reserve(now, keys, h.limitsFor(attrs), units, now+hold)
	h.logResult(got)
	h.compare("reserve", got, want)
	t := got.Ticket()
	if t.Valid() != (want.ticket >= 0) {
		h.fail("reserve: ticket valid %v, want %v", t.Valid(), want.ticket >= 0)
	}
	if !t.Valid() {
		return got
	}
	mt := h.model.tickets[want.ticket]
	if t.Cost != units || t.Until.UnixMicro() != now+hold || len(t.Entries) != len(mt.entries) {
		h.fail("reserve: ticket cost %d, until %d, %d entries; want %d, %d, %d",
			t.Cost, t.Until.UnixMicro(), len(t.Entries), units, now+hold, len(mt.entries))
	}
	for i, e := range t.Entries {
		if e.Rule != h.specs[mt.entries[i].rule].name || e.Stamp != mt.entries[i].stamp {
			h.fail("reserve: ticket entry %d is rule %s stamp %d, want %s stamp %d",
				i, e.Rule, e.Stamp, h.specs[mt.entries[i].rule].name, mt.entries[i].stamp)
		}
	}
	h.reservations = append(h.reservations, heldReservation{real: t, model: want.ticket, settled: -1})
	return got
}

// settle settles a random reservation (perhaps again) with random usage,
// up to twice what it holds, or releases it (Release, or Refund of its
// ticket), and compares what Settle found with the model.
func (h *harness) settle(release bool) {
	h.t.Helper()
	if len(h.reservations) == 0 {
		return
	}
	i := h.rng.IntN(len(h.reservations))
	r := &h.reservations[i]
	if r.settled >= 0 && h.now()-r.settled >= h.settledLifetime(r) {
		// A store may have forgotten that it settled it.
		h.reservations = append(h.reservations[:i], h.reservations[i+1:]...)
		return
	}
	tk := r.real
	if h.rng.IntN(2) == 0 {
		tk = h.roundTrip(tk)
	}
	if r.settled < 0 {
		r.settled = h.now()
	}
	if release {
		h.logf("release reservation #%d (units %d, spent %v)", r.model, tk.Cost, h.model.tickets[r.model].spent)
		var err error
		if h.rng.IntN(2) == 0 {
			err = h.lim.Release(h.ctx, tk)
		} else {
			err = h.lim.Refund(h.ctx, tk)
		}
		if err != nil {
			h.fail("release: %v", err)
		}
		h.model.refund(h.now(), r.model)
		return
	}
	used := h.rng.Int64N(2*tk.Cost + 1)
	h.logf("settle reservation #%d (units %d, spent %v) used=%d", r.model, tk.Cost, h.model.tickets[r.model].spent, used)
	got, err := h.lim.Settle(h.ctx, tk, used)
	if err != nil {
		h.fail("Settle: %v", err)
	}
	if want := h.model.settle(h.now(), r.model, used); got != want {
		h.fail("settle: %v, want %v", got, want)
	}
}

// settledLifetime is how long a store must remember that it settled r:
// as long as it remembers a refunded ticket of its rules.
func (h *harness) settledLifetime(r *heldReservation) int64 {
	var life int64
	for _, e := range h.model.tickets[r.model].entries {
		s := h.specs[e.rule]
		switch s.align {
		case floodgate.AlignDay:
			life = max(life, int64(25*time.Hour/time.Microsecond))
		case floodgate.AlignMonth:
			life = max(life, int64(32*24*time.Hour/time.Microsecond))
		default:
			life = max(life, s.window)
		}
	}
	return life
}

// settleOldest settles the oldest hold of the request's keys with used
// units and compares what it found with the model.
func (h *harness) settleOldest(attrs floodgate.Attributes, keys []string, used int64) {
	h.t.Helper()
	h.logf("settle oldest %v used=%d", attrs, used)
	got, err := h.lim.SettleOldest(h.ctx, attrs, used)
	if err != nil {
		h.fail("SettleOldest: %v", err)
	}
	if want := h.model.settleOldest(h.now(), keys, h.limitsFor(attrs), used); got != want {
		h.fail("settle oldest: %v, want %v", got, want)
	}
}

// roundTrip is t encoded and decoded, as the decision service hands
// tickets out and back.
func (h *harness) roundTrip(t floodgate.Ticket) floodgate.Ticket {
	h.t.Helper()
	b, err := t.MarshalBinary()
	if err != nil {
		h.fail("Ticket.MarshalBinary: %v", err)
	}
	var out floodgate.Ticket
	if err := out.UnmarshalBinary(b); err != nil {
		h.fail("Ticket.UnmarshalBinary: %v", err)
	}
	return out
}

// budgetRule is a reservable rule: limit units an hour per tenant, in
// clock-aligned windows.
func budgetRule(limit int64) floodgate.Rule {
	return floodgate.Rule{Name: "budget", Algorithm: floodgate.FixedWindow, Limit: limit, Window: time.Hour,
		Align: floodgate.AlignClock, Key: []string{"tenant"}, Reservable: true}
}

// reserve reserves units for hold and returns the outcome.
func (f *fixture) reserve(attrs floodgate.Attributes, units int64, hold time.Duration) floodgate.Outcome {
	f.t.Helper()
	o, err := f.lim.Reserve(f.ctx, attrs, units, hold)
	if err != nil {
		f.t.Fatalf("Reserve(%v, %d, %v): %v", attrs, units, hold, err)
	}
	if o.Err != nil {
		f.t.Fatalf("Reserve(%v, %d, %v): store error %v", attrs, units, hold, o.Err)
	}
	return o
}

// reserved reserves units for hold, fails unless they are admitted, and
// returns the reservation's ticket.
func (f *fixture) reserved(attrs floodgate.Attributes, units int64, hold time.Duration) floodgate.Ticket {
	f.t.Helper()
	o := f.reserve(attrs, units, hold)
	if !o.Allowed || !o.Ticket().Valid() {
		f.t.Fatalf("Reserve(%v, %d, %v): %+v, want admitted with a ticket", attrs, units, hold, o)
	}
	return o.Ticket()
}

// settle settles t with used units and fails unless Settle finds want.
func (f *fixture) settle(t floodgate.Ticket, used int64, want floodgate.Settlement) {
	f.t.Helper()
	got, err := f.lim.Settle(f.ctx, t, used)
	if err != nil || got != want {
		f.t.Fatalf("Settle(used %d) = %v, %v; want %v", used, got, err, want)
	}
}

// settleOldest settles the oldest holds of attrs' keys with used units
// and fails unless SettleOldest finds want.
func (f *fixture) settleOldest(attrs floodgate.Attributes, used int64, want floodgate.Settlement) {
	f.t.Helper()
	got, err := f.lim.SettleOldest(f.ctx, attrs, used)
	if err != nil || got != want {
		f.t.Fatalf("SettleOldest(%v, used %d) = %v, %v; want %v", attrs, used, got, err, want)
	}
}

// left is what a peek says is left of the budget.
func (f *fixture) left(attrs floodgate.Attributes) int64 {
	f.t.Helper()
	return f.remaining(attrs)["budget"]
}

func testReservations(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	acme := floodgate.Attributes{"tenant": "acme", "user": "u"}
	t.Run("all_or_nothing", func(t *testing.T) {
		f := newFixture(t, store, "reserve-aon", nil, budgetRule(100), counterRule("per-user", floodgate.FixedWindow, 2, "user"))
		o := f.reserve(acme, 60, time.Minute)
		if !o.Allowed || ruleOf(t, o, "budget").Remaining != 40 || ruleOf(t, o, "per-user").Remaining != 1 {
			t.Fatalf("reserve 60 of 100: %+v, want admitted, 40 left of the budget, the user's rule charged 1", o.Rules)
		}
		if tk := o.Ticket(); tk.Cost != 60 || len(tk.Entries) != 1 || tk.Entries[0].Rule != "budget" ||
			!tk.Until.Equal(f.clock.Now().Add(time.Minute)) {
			t.Fatalf("reservation ticket %+v, want 60 units of the budget alone, until a minute from now", tk)
		}
		d := f.reserve(acme, 50, time.Minute)
		if d.Allowed || d.Rule != "budget" || d.RetryAfter != time.Minute {
			t.Fatalf("reserve 50 with 40 left: %+v, want denied by the budget until the hold lapses", d)
		}
		if d.Ticket().Valid() {
			t.Fatal("a denied reservation has a valid ticket")
		}
		if got := f.remaining(acme); got["budget"] != 40 || got["per-user"] != 1 {
			t.Fatalf("after a denied reservation: remaining %v, want budget 40, per-user 1", got)
		}
		f.reserved(acme, 30, time.Minute)
		d = f.reserve(acme, 1, time.Minute)
		if d.Allowed || d.Rule != "per-user" || ruleOf(t, d, "budget").Remaining != 10 {
			t.Fatalf("reserve with the user's rule spent: %+v, want denied by per-user", d)
		}
		if got := f.remaining(acme)["budget"]; got != 10 {
			t.Fatalf("a reservation another rule denied held %d units", 10-got)
		}
		if d := f.reserve(floodgate.Attributes{"tenant": "other"}, 101, time.Minute); d.Allowed || !d.Never {
			t.Fatalf("reserve 101 of a budget of 100: %+v, want denied, never", d)
		}
		// A shadow budget that would deny holds nothing, and the
		// reservation has no hold to settle.
		dark := budgetRule(10)
		dark.Shadow = true
		f = newFixture(t, store, "reserve-shadow", nil, dark, counterRule("per-user", floodgate.FixedWindow, 5, "user"))
		d = f.reserve(acme, 20, time.Minute)
		if !d.Allowed || !d.ShadowDenied || d.Ticket().Valid() {
			t.Fatalf("reserve 20 of a shadow budget of 10: %+v, want admitted, shadow denied, no ticket", d)
		}
		if got := f.remaining(acme); got["budget"] != 10 || got["per-user"] != 4 {
			t.Fatalf("after a shadow denial: remaining %v, want budget 10, per-user 4", got)
		}
	})
	t.Run("holds_count", func(t *testing.T) {
		f := newFixture(t, store, "reserve-counts", nil, budgetRule(100))
		f.reserved(acme, 60, 10*time.Minute)
		f.clock.Advance(time.Minute)
		f.reserved(acme, 30, 20*time.Minute)
		d := f.allow(acme, 11)
		if d.Allowed || d.RetryAfter != 9*time.Minute || d.Remaining != 10 {
			t.Fatalf("11 units with 90 held: %+v, want denied for 9 minutes, 10 left", d)
		}
		if d := f.allow(acme, 71); d.Allowed || d.RetryAfter != 20*time.Minute {
			t.Fatalf("71 units with 90 held: %+v, want denied until the second hold lapses", d)
		}
		f.clock.Advance(9 * time.Minute)
		f.admit(acme, 70)
		if d, _ := f.lim.Record(f.ctx, acme, 5); d.Allowed || d.Remaining != 0 {
			t.Fatalf("a record past the budget with 30 held: %+v, want a peek's denial, 0 left", d)
		}
		if err := f.lim.Reset(f.ctx, acme); err != nil {
			t.Fatal(err)
		}
		if got := f.left(acme); got != 100 {
			t.Fatalf("after a reset: %d left, want 100 (holds forgotten)", got)
		}
	})
	t.Run("settle_below_and_above", func(t *testing.T) {
		f := newFixture(t, store, "reserve-settle", nil, budgetRule(100))
		early := f.admit(acme, 20)
		f.settle(f.reserved(acme, 60, time.Minute), 20, floodgate.Settled)
		if got := f.left(acme); got != 60 {
			t.Fatalf("60 reserved, 20 used: %d left, want 60", got)
		}
		f.settle(f.reserved(acme, 50, time.Minute), 55, floodgate.Settled)
		if got := f.left(acme); got != 5 {
			t.Fatalf("50 reserved, 55 used: %d left, want 5 (the excess charged)", got)
		}
		tk := f.reserved(acme, 5, time.Minute)
		if d := f.allow(acme, 1); d.Allowed {
			t.Fatal("a unit admitted with the budget reserved to its end")
		}
		f.settle(tk, 20, floodgate.Settled)
		if d := f.allow(acme, 1); d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Hour {
			t.Fatalf("budget overspent by a settlement's excess: %+v, want denied to the window's end", d)
		}
		// 115 charged, past the budget by that excess alone: giving
		// back the first 20 leaves 5.
		f.refund(early)
		if got := f.left(acme); got != 5 {
			t.Fatalf("115 charged, 20 refunded: %d left, want 5", got)
		}
		f.clock.Advance(time.Hour)
		if got := f.left(acme); got != 100 {
			t.Fatalf("the next window: %d left, want 100", got)
		}
	})
	t.Run("settle_twice", func(t *testing.T) {
		f := newFixture(t, store, "reserve-twice", nil, budgetRule(100))
		tk := f.reserved(acme, 60, time.Minute)
		f.reserved(acme, 10, time.Minute)
		f.settle(tk, 10, floodgate.Settled)
		f.settle(tk, 50, floodgate.AlreadySettled)
		f.settle(tk, 0, floodgate.AlreadySettled)
		if err := f.lim.Release(f.ctx, tk); err != nil {
			t.Fatal(err)
		}
		if got := f.left(acme); got != 80 {
			t.Fatalf("settled once with 10, then again: %d left, want 80", got)
		}
	})
	t.Run("settle_lapsed", func(t *testing.T) {
		f := newFixture(t, store, "reserve-lapsed", nil, budgetRule(100))
		tk := f.reserved(acme, 60, time.Minute)
		f.clock.Advance(time.Minute - time.Microsecond)
		if got := f.left(acme); got != 40 {
			t.Fatalf("a µs before the hold lapses: %d left, want 40", got)
		}
		f.clock.Advance(time.Microsecond)
		if got := f.left(acme); got != 100 {
			t.Fatalf("the hold lapsed: %d left, want 100", got)
		}
		f.settle(tk, 30, floodgate.Lapsed)
		if got := f.left(acme); got != 70 {
			t.Fatalf("settled after the hold lapsed: %d left, want 70 (the usage charged)", got)
		}
		f.settle(tk, 30, floodgate.AlreadySettled)
		// Settled after its window ended: charged nowhere.
		tk = f.reserved(acme, 60, 2*time.Hour)
		f.clock.Advance(time.Hour)
		f.settle(tk, 30, floodgate.Lapsed)
		if got := f.left(acme); got != 100 {
			t.Fatalf("settled in the next window: %d left, want 100", got)
		}
	})
	t.Run("hold_ends_with_window", func(t *testing.T) {
		f := newFixture(t, store, "reserve-window", nil, budgetRule(100))
		f.clock.Advance(30 * time.Minute)
		o := f.reserve(acme, 50, 2*time.Hour)
		if !o.Allowed || o.ResetAfter != 30*time.Minute {
			t.Fatalf("reserve half an hour before the window ends: %+v, want admitted, reset in 30m", o)
		}
		f.clock.Advance(30*time.Minute - time.Microsecond)
		if got := f.left(acme); got != 50 {
			t.Fatalf("a µs before the window ends: %d left, want 50", got)
		}
		f.clock.Advance(time.Microsecond)
		if got := f.left(acme); got != 100 {
			t.Fatalf("the next window: %d left, want 100 (the hold ended with its window)", got)
		}
		f.settle(o.Ticket(), 50, floodgate.Lapsed)
		// A first-hit window opened by a reservation lives to its end.
		first := budgetRule(100)
		first.Align, first.Window = floodgate.AlignFirstHit, time.Minute
		f = newFixture(t, store, "reserve-first-hit", nil, first)
		o = f.reserve(acme, 50, time.Hour)
		if o.ResetAfter != time.Minute {
			t.Fatalf("reservation on a first-hit window: reset %v, want the window, 1m", o.ResetAfter)
		}
		f.clock.Advance(time.Minute)
		if d := f.admit(acme, 100); d.ResetAfter != time.Minute {
			t.Fatalf("the next window: %+v, want all 100 admitted in a window of its own", d)
		}
		// Settling a lapsed hold with nothing used is a write all the
		// same: the window, counting nothing, is gone, and the next hit
		// opens one of its own.
		f = newFixture(t, store, "reserve-first-hit-lapsed", nil, first)
		tk := f.reserved(acme, 50, time.Second)
		f.clock.Advance(time.Second)
		f.settle(tk, 0, floodgate.Lapsed)
		f.clock.Advance(time.Second)
		if d := f.admit(acme, 100); d.ResetAfter != time.Minute {
			t.Fatalf("after a lapsed hold settled with nothing used: %+v, want all 100 admitted in a window of its own", d)
		}
		// A key reset in the instant its hold was taken opens, at once, the
		// window the hold names: settling it charges that window.
		f = newFixture(t, store, "reserve-first-hit-reset", nil, first)
		tk = f.reserved(acme, 50, time.Hour)
		if err := f.lim.Reset(f.ctx, acme); err != nil {
			t.Fatal(err)
		}
		f.settle(tk, 30, floodgate.Lapsed)
		f.clock.Advance(time.Second)
		if d := f.admit(acme, 70); d.ResetAfter != time.Minute-time.Second {
			t.Fatalf("after a reset and a settle of 30 in the hold's instant: %+v, want 70 admitted in the window the hold named", d)
		}
	})
	t.Run("settle_oldest", func(t *testing.T) {
		f := newFixture(t, store, "reserve-oldest", nil, budgetRule(100))
		a := f.reserved(acme, 20, 30*time.Minute)
		b := f.reserved(acme, 20, 10*time.Minute)
		c := f.reserved(acme, 20, 10*time.Minute) // lapses with b, taken after it
		f.settleOldest(acme, 5, floodgate.Settled)
		if got := f.left(acme); got != 55 {
			t.Fatalf("oldest of three holds of 20 settled with 5: %d left, want 55", got)
		}
		f.settle(c, 5, floodgate.Settled) // still held: b went first
		f.settle(b, 5, floodgate.Lapsed)
		f.settle(a, 5, floodgate.Settled)
		if got := f.left(acme); got != 80 {
			t.Fatalf("all settled with 5, b twice: %d left, want 80", got)
		}
		f.settleOldest(acme, 7, floodgate.Lapsed) // no hold: the usage alone
		if got := f.left(acme); got != 73 {
			t.Fatalf("settle oldest with no hold: %d left, want 73", got)
		}
		f.settleOldest(floodgate.Attributes{"user": "u"}, 7, floodgate.Settled) // no budget applies
	})
	t.Run("release", func(t *testing.T) {
		f := newFixture(t, store, "reserve-release", nil, budgetRule(100))
		tk := f.reserved(acme, 60, time.Minute)
		if err := f.lim.Release(f.ctx, tk); err != nil {
			t.Fatal(err)
		}
		if got := f.left(acme); got != 100 {
			t.Fatalf("released: %d left, want 100", got)
		}
		f.settle(tk, 60, floodgate.AlreadySettled)
		// A refund of a reservation's ticket releases it.
		tk = f.reserved(acme, 60, time.Minute)
		if err := f.lim.Refund(f.ctx, tk); err != nil {
			t.Fatal(err)
		}
		if got := f.left(acme); got != 100 {
			t.Fatalf("refunded: %d left, want 100", got)
		}
		f.settle(tk, 60, floodgate.AlreadySettled)
		if got := f.left(acme); got != 100 {
			t.Fatalf("settled after its refund: %d left, want 100", got)
		}
	})
}
