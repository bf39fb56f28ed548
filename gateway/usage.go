package gateway

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// RecordUsage records cost, the actual usage of work admitted under ticket t,
// into lim's rules for attrs, less what that admission already charged
// them.
//
// The pattern it serves: a route's limiter holds a requests-per-minute rule
// and a tokens-per-minute rule; choosing the route is one AllowN(1), which
// checks that both have room and charges 1 to both. The tokens are known
// only after the response; lim (made with Limiter.Only) holds the token
// rules, and RecordUsage with the admission's ticket records cost−1 into them,
// so that they end up charged exactly cost. A cost below what the
// admission charged refunds the admission's charge to lim's rules (and
// only those) and records cost instead; the ticket is then spent.
//
// When t charged none of lim's rules (the zero Ticket, a ticket of another
// limiter, or an admission by a failed store under FailOpen), RecordUsage is
// lim.Record(cost). A nil lim or a negative cost is an error. The outcome
// is the record's, with what each of lim's rules decided.
func RecordUsage(ctx context.Context, lim *floodgate.Limiter, t floodgate.Ticket, attrs floodgate.Attributes, cost int64) (floodgate.Outcome, error) {
	if lim == nil {
		return floodgate.Outcome{}, errors.New("gateway: RecordUsage needs a limiter")
	}
	if cost < 0 {
		return floodgate.Outcome{}, fmt.Errorf("gateway: limiter %q: recorded usage %d must not be negative", lim.Name(), cost)
	}
	deposit := deposit(lim, t)
	if cost >= deposit {
		return lim.Decide(ctx, floodgate.ModeRecord, attrs, cost-deposit)
	}
	// Refunding gives the deposit back to lim's rules only: lim does not
	// hold the admission's other rules, so their entries are passed over.
	// A refund that fails leaves the rules stricter, never looser.
	_ = lim.Refund(ctx, t)
	return lim.Decide(ctx, floodgate.ModeRecord, attrs, cost)
}

// deposit returns what the admission under t charged lim's rules: its cost
// when t is lim's and charged one of lim's rules, else 0.
func deposit(lim *floodgate.Limiter, t floodgate.Ticket) int64 {
	if t.Limiter != lim.Name() {
		return 0
	}
	for _, e := range t.Entries {
		if _, ok := lim.Rule(e.Rule); ok {
			return t.Cost
		}
	}
	return 0
}
