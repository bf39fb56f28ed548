package storetest

import (
	"time"

	"github.com/floodgate-go/floodgate"
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
