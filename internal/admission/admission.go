// Package admission is what floodgate's middlewares (httplimit, grpclimit)
// share about one request: its decision before the handler runs, asked for
// with the per-rule results and tickets only where the middleware needs
// them, and the settling of its charge when the handler returns (a refund,
// a released lease, usage recorded, a reservation settled).
package admission

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Options say what a middleware needs of its decisions.
type Options struct {
	// Rules asks for every rule's results on every decision, for quota
	// headers or a handler that reads the decision.
	Rules bool
	// Refunds says that End may be asked to give an admitted request's
	// whole charge back (a middleware counting only failures or only
	// successes).
	Refunds bool
	// ChargeAfter admits a request when one unit is available now,
	// charging nothing up front, and End records the usage the handler
	// reported. Concurrency rules take their lease up front and hold it
	// until End; the usage goes to the other rules.
	ChargeAfter bool
	// Hold, when not 0, makes every request a reservation (Gate.Reserve):
	// units of the limiter's reservable rules held for Hold, with one
	// unit of its other rules, all or nothing; End settles it with the
	// usage the handler reported. It cannot be combined with ChargeAfter,
	// and the limiter needs a reservable rule.
	Hold time.Duration
}

// Gate decides requests with a limiter and settles them when their handlers
// return. It is safe for concurrent use.
type Gate struct {
	limiter     *floodgate.Limiter
	chargeAfter bool
	hold        time.Duration // reservations' (Options.Hold); 0 for none
	// detail: decisions are made with Limiter.Decide, which builds the
	// per-rule results and the tickets. Otherwise Allow and Peek give the
	// binding rule's figures alone, for less.
	detail bool
	// With ChargeAfter and Concurrency rules: the views that hold the
	// handler's lease and take the usage after (splitLeases).
	leases, rest *floodgate.Limiter
}

// New returns the gate of l for a middleware needing what opts say. It
// returns an error for reservations (Options.Hold) that l cannot make.
func New(l *floodgate.Limiter, opts Options) (*Gate, error) {
	rules := l.Rules()
	leased := slices.ContainsFunc(rules, func(r floodgate.Rule) bool { return r.Algorithm == floodgate.Concurrency })
	if opts.Hold != 0 {
		switch {
		case opts.ChargeAfter:
			return nil, errors.New("a reservation is settled with the usage after the handler; it cannot be combined with ChargeAfter")
		case opts.Hold < time.Millisecond:
			return nil, fmt.Errorf("the reservations' hold %v must be at least 1ms", opts.Hold)
		case !slices.ContainsFunc(rules, func(r floodgate.Rule) bool { return r.Reservable }):
			return nil, errors.New("reservations need a reservable rule (Rule.Reservable), and the limiter has none")
		}
	}
	g := &Gate{
		limiter:     l,
		chargeAfter: opts.ChargeAfter,
		hold:        opts.Hold,
		// Refunds, leases and reservations need the tickets. A denial
		// names the rules that denied: the lean decision of a one-rule
		// limiter names it (Decision.Rule), one of several rules does
		// not.
		detail: opts.Rules || opts.Refunds || leased || opts.Hold != 0 || len(rules) > 1,
	}
	if opts.ChargeAfter && leased {
		var err error
		if g.leases, g.rest, err = splitLeases(l, rules); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// splitLeases returns two views of l with the given rules (see
// floodgate.Limiter.Only), sharing its state: one with l's Concurrency
// rules, one with the others, either nil when l has none. Work whose usage
// is known only when it ends holds a lease of the first for its whole
// duration and records its usage into the second: recording into l itself
// would add a lease that is never released.
func splitLeases(l *floodgate.Limiter, rules []floodgate.Rule) (leases, rest *floodgate.Limiter, err error) {
	var ln, rn []string
	for _, r := range rules {
		if r.Algorithm == floodgate.Concurrency {
			ln = append(ln, r.Name)
		} else {
			rn = append(rn, r.Name)
		}
	}
	if len(ln) > 0 {
		if leases, err = l.Only(ln...); err != nil {
			return nil, nil, err
		}
	}
	if len(rn) > 0 {
		if rest, err = l.Only(rn...); err != nil {
			return nil, nil, err
		}
	}
	return leases, rest, nil
}

// Admission is the decision on one request and what settling it needs.
type Admission struct {
	// Outcome is the request's decision. Its Rules are set when
	// Options.Rules asked for them, and may be set otherwise.
	Outcome floodgate.Outcome
	// Lease is, under ChargeAfter with Concurrency rules and others, the
	// admitted decision of the Concurrency rules, whose lease the handler
	// holds; Outcome is then the other rules' peek. Otherwise it is the
	// zero Outcome.
	Lease floodgate.Outcome

	g     *Gate
	attrs floodgate.Attributes
}

// Admit decides a request with attributes attrs. Under ChargeAfter, an
// admitted request's attrs must stay as they are until End. A gate of
// reservations (Options.Hold) reserves one unit: see Reserve.
func (g *Gate) Admit(ctx context.Context, attrs floodgate.Attributes) Admission {
	return g.Reserve(ctx, attrs, 1)
}

// Reserve decides a request with attributes attrs that may use up to units
// (at least 1; less is taken as 1). A gate of reservations (Options.Hold)
// holds them (floodgate.Limiter.Reserve), and End settles the reservation;
// any other gate decides as Admit does, and units mean nothing to it.
func (g *Gate) Reserve(ctx context.Context, attrs floodgate.Attributes, units int64) Admission {
	a := Admission{g: g, attrs: attrs}
	switch {
	case g.hold != 0:
		// The limiter has a reservable rule and the hold is valid (New):
		// Reserve returns no error.
		a.Outcome, _ = g.limiter.Reserve(ctx, attrs, max(units, 1), g.hold)
	case g.leases != nil:
		// The handler holds its in-flight slot; the other rules must
		// admit one unit and are charged its usage after.
		lease := g.decide(ctx, g.leases, floodgate.ModeConsume, attrs)
		a.Outcome = lease
		if lease.Allowed && g.rest != nil {
			a.Outcome = g.decide(ctx, g.rest, floodgate.ModePeek, attrs)
			if a.Outcome.Allowed {
				a.Lease = lease
			} else {
				refund(ctx, g.leases, lease.LeaseTicket())
			}
		}
	case g.chargeAfter:
		a.Outcome = g.decide(ctx, g.limiter, floodgate.ModePeek, attrs)
	default:
		a.Outcome = g.decide(ctx, g.limiter, floodgate.ModeConsume, attrs)
	}
	return a
}

// decide makes one decision of one unit on l, in full only when the gate
// needs the detail.
func (g *Gate) decide(ctx context.Context, l *floodgate.Limiter, mode floodgate.Mode, attrs floodgate.Attributes) floodgate.Outcome {
	if g.detail {
		o, _ := l.Decide(ctx, mode, attrs, 1) // a cost of 1 is valid in every mode
		return o
	}
	if mode == floodgate.ModePeek {
		d, _ := l.Peek(ctx, attrs, 1)
		return floodgate.Outcome{Decision: d}
	}
	return floodgate.Outcome{Decision: l.Allow(ctx, attrs)}
}

// Violated calls f with the name and limit of each rule that denied the
// request, in rule order; shadow rules never do. It calls f for none when
// the request was admitted or the store failed.
func (a *Admission) Violated(f func(name string, limit int64)) {
	o := &a.Outcome
	if o.Allowed || o.Reason != floodgate.ReasonLimit {
		return
	}
	if !a.g.detail { // a one-rule limiter: its rule denied
		f(o.Rule, o.Limit)
		return
	}
	for _, r := range o.Rules {
		if !r.Allowed && !r.Shadow {
			f(r.Name, r.Limit)
		}
	}
}

// End settles an admitted request when its handler returns. A
// reservation is settled with used units (0 releases it) and its leases
// released. Under ChargeAfter it records used units into the rules that
// count usage and releases the lease; otherwise it gives back the whole
// charge when refundAll is set (see Options.Refunds), or else releases the
// Concurrency leases alone. A refund or a settlement that cannot be applied
// is logged by the limiter; a refund's only leaves it stricter, a
// settlement's holds lapse at their hold time.
func (a *Admission) End(ctx context.Context, refundAll bool, used int64) {
	g := a.g
	ctx = context.WithoutCancel(ctx) // the charge is settled even when the caller has gone
	if g.hold != 0 {
		if t := a.Outcome.Ticket(); t.Valid() {
			g.limiter.Settle(ctx, t, max(used, 0)) // a failure is logged; the holds lapse on their own
		}
		refund(ctx, g.limiter, a.Outcome.LeaseTicket())
		return
	}
	if !g.chargeAfter {
		t := a.Outcome.LeaseTicket()
		if refundAll {
			t = a.Outcome.Ticket()
		}
		refund(ctx, g.limiter, t)
		return
	}
	charged := g.limiter
	if g.leases != nil {
		charged = g.rest // a record into the whole limiter would add a lease never released
	}
	if used > 0 && charged != nil {
		charged.Record(ctx, a.attrs, used)
	}
	if g.leases != nil {
		lease := a.Lease
		if g.rest == nil {
			lease = a.Outcome // every rule is a Concurrency rule
		}
		refund(ctx, g.leases, lease.LeaseTicket())
	}
}

// refund gives t back to l, if there is anything to give.
func refund(ctx context.Context, l *floodgate.Limiter, t floodgate.Ticket) {
	if t.Valid() {
		l.Refund(context.WithoutCancel(ctx), t) // a failed refund is logged and only makes the limiter stricter
	}
}
