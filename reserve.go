package floodgate

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// Reservations: the exact way to keep a budget when the cost of work is
// known only once it is done (an LLM answer's tokens). Reserve holds the
// most the work can cost on the budget's rules, with the request's other
// rules, all or nothing; Settle then charges what it used in the hold's
// place. Concurrent work never spends more than the budget: every check
// sees the units the others hold. A hold not settled by its time is given
// back by the store itself, so a process that dies mid-work strands
// nothing.

// Reserve asks for units of each reservable rule (Rule.Reservable) that
// applies to attrs, held for hold, and one unit of its other applicable
// rules, all or nothing, in one store call. Admitted, the held units count
// against their rules until Settle ends the reservation with the units
// used, or until hold has passed, when the store gives them back by
// itself (a hold also ends with its rule's window). The Outcome's Ticket
// settles or releases the reservation; a denied Reserve holds and charges
// nothing. It returns an error for a limiter without reservable rules,
// units below 1 and a hold under a millisecond.
func (l *Limiter) Reserve(ctx context.Context, attrs Attributes, units int64, hold time.Duration) (Outcome, error) {
	switch {
	case !l.reservable:
		return Outcome{}, sprintfErr("floodgate: limiter %q has no reservable rule to reserve units of", l.name)
	case units < 1:
		return Outcome{}, sprintfErr("floodgate: limiter %q: reserved units %d must be at least 1", l.name, units)
	case hold < time.Millisecond:
		return Outcome{}, sprintfErr("floodgate: limiter %q: hold %v must be at least 1ms", l.name, hold)
	}
	var o Outcome
	l.decide(ctx, ModeConsume, 1, attrs, "", &holdAsk{units, hold}, &o)
	return o, nil
}

// Settlement says what Settle found.
type Settlement uint8

const (
	// Settled: every hold was still held; each was given back, and the
	// units used charged in its place.
	Settled Settlement = iota
	// Lapsed: a hold had lapsed (its time passed, or its window ended)
	// and its units were back already; the units used were charged all the
	// same, while their window is current.
	Lapsed
	// AlreadySettled: the reservation was settled or released before;
	// nothing changed.
	AlreadySettled
)

// String returns "settled", "lapsed" or "already_settled".
func (s Settlement) String() string {
	switch s {
	case Lapsed:
		return "lapsed"
	case AlreadySettled:
		return "already_settled"
	}
	return "settled"
}

// ErrNotReservation is returned by Settle for a ticket that is not a
// reservation's.
var ErrNotReservation = errors.New("floodgate: the ticket is not a reservation's")

// Settle ends the reservation of t (an admitted Reserve's Ticket) with
// used, the units the work used: each hold is given back and used charged
// in its place, in the window the hold was taken in, in one store call.
// Used above the reservation is charged too, and may push a rule past its
// limit by that excess. Settling twice, or after the holds lapsed, is
// harmless and says so. Like a refund, a settlement the store cannot apply
// is logged and its error returned; the holds then lapse on their own.
func (l *Limiter) Settle(ctx context.Context, t Ticket, used int64) (Settlement, error) {
	switch {
	case used < 0:
		return 0, sprintfErr("floodgate: limiter %q: settled usage %d must not be negative", l.name, used)
	case !t.Valid() || t.Until.IsZero():
		return 0, ErrNotReservation
	case t.Limiter != l.name:
		return 0, ErrForeignTicket
	}
	sh := sheet{call: store.Call{Mode: store.Settle, Cost: used, Ticket: t.ID, Now: l.clock.Now().UnixMicro()}}
	for _, e := range t.Entries {
		if r := l.byName[e.Rule]; r != nil && r.Reservable {
			p := r.refundParams(e)
			limit, burst := r.overrides(&p)
			sh.add(r, e.Key, limit, burst, false, e.Stamp)
		}
	}
	return l.settle(ctx, &sh)
}

// Release ends the reservation of t with nothing used: Settle(ctx, t, 0).
func (l *Limiter) Release(ctx context.Context, t Ticket) error {
	_, err := l.Settle(ctx, t, 0)
	return err
}

// SettleOldest ends, on each reservable rule's key for attrs, the oldest
// live hold (the first to lapse), whoever reserved it, charging used in
// its place, or charges used alone where no hold is live: for callers that
// cannot carry the ticket, such as Envoy's charge when an answer's stream
// is done.
func (l *Limiter) SettleOldest(ctx context.Context, attrs Attributes, used int64) (Settlement, error) {
	if used < 0 {
		return 0, sprintfErr("floodgate: limiter %q: settled usage %d must not be negative", l.name, used)
	}
	sh := sheet{call: store.Call{Mode: store.Settle, Cost: used, Now: l.clock.Now().UnixMicro()}}
	for _, r := range l.rules {
		if !r.Reservable {
			continue
		}
		key := r.keyFor(attrs)
		if key == "" {
			continue
		}
		p, err := r.paramsFor(ctx, attrs)
		if err != nil {
			return 0, err
		}
		limit, burst := r.overrides(&p)
		sh.add(r, key, limit, burst, false, 0)
	}
	return l.settle(ctx, &sh)
}

// settle has the store settle sh and says what it found.
func (l *Limiter) settle(ctx context.Context, sh *sheet) (Settlement, error) {
	if sh.n == 0 {
		return Settled, nil
	}
	if err := l.exec(ctx, sh); err != nil {
		l.logger.WarnContext(ctx, "floodgate: settlement not applied", "limiter", l.name, "err", err)
		return 0, err
	}
	if !sh.ans.Allowed {
		return AlreadySettled, nil
	}
	for i := range sh.n {
		if !sh.res(i).Allowed {
			return Lapsed, nil
		}
	}
	return Settled, nil
}
