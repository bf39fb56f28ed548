package floodgate

import (
	"context"
	"maps"
	"slices"

	"github.com/floodgate-go/floodgate/internal/algo"
)

// Weights give each token class its price in cost units: with
// Weights{"input": 1, "output": 3}, a response of 2 input and 3 output
// tokens costs 2×1 + 3×3 = 11. Weights are whole numbers; express fractional
// prices in a finer unit (input 4, output 12, cached 1 prices cached tokens
// at a quarter of input ones).
type Weights map[string]int64

// Usage counts the tokens of one piece of work by class.
type Usage map[string]int64

// Validate reports a class with an empty name or a negative weight.
func (w Weights) Validate() error {
	for class, weight := range w {
		if class == "" {
			return sprintfErr("floodgate: token class with an empty name")
		}
		if weight < 0 {
			return sprintfErr("floodgate: token class %q: weight %d must not be negative", class, weight)
		}
	}
	return nil
}

// Cost returns the weighted cost of u: the sum over its classes of tokens
// times weight. A class without a weight is an error, so that a new kind of
// token is never silently free; so are negative counts and a cost beyond
// the largest a decision can carry (2^53).
func (w Weights) Cost(u Usage) (int64, error) {
	var cost int64
	for class, n := range u {
		c, ok := w.add(cost, class, n)
		if !ok {
			return 0, w.costError(u)
		}
		cost = c
	}
	return cost, nil
}

// add returns cost plus n tokens of class, or false when that is an error.
func (w Weights) add(cost int64, class string, n int64) (int64, bool) {
	weight, ok := w[class]
	if !ok || n < 0 || weight != 0 && n > (algo.MaxUnits-cost)/weight {
		return 0, false
	}
	return cost + n*weight, true
}

// costError describes what is wrong with u, looking at its classes in
// sorted order so that the error is always the same one.
func (w Weights) costError(u Usage) error {
	var cost int64
	for _, class := range slices.Sorted(maps.Keys(u)) {
		n := u[class]
		if c, ok := w.add(cost, class, n); ok {
			cost = c
			continue
		}
		switch _, known := w[class]; {
		case !known:
			return sprintfErr("floodgate: unknown token class %q", class)
		case n < 0:
			return sprintfErr("floodgate: token class %q: count %d must not be negative", class, n)
		}
		break
	}
	return sprintfErr("floodgate: weighted cost exceeds %d", int64(algo.MaxUnits))
}

// Settle records cost, the actual usage of work admitted under ticket t,
// into l's rules for attrs, less what that admission already charged them.
//
// The pattern it serves: a route's limiter holds a requests-per-minute rule
// and a tokens-per-minute rule; choosing the route is one AllowN(1), which
// checks that both have room and charges 1 to both. The tokens are known
// only after the response; l (made with Only) holds the token rules, and
// Settle with the admission's ticket records cost−1 into them, so that they
// end up charged exactly cost. A cost below what the admission charged
// refunds the admission's charge to l's rules (and only those) and records
// cost instead; the ticket is then spent.
//
// When t charged none of l's rules (the zero Ticket, a ticket of another
// limiter, or an admission by a failed store under FailOpen), Settle is
// Record(cost).
func (l *Limiter) Settle(ctx context.Context, t Ticket, attrs Attributes, cost int64) (Decision, error) {
	if cost < 0 {
		return Decision{}, sprintfErr("floodgate: limiter %q: settled cost %d must not be negative", l.name, cost)
	}
	var deposit int64
	if t.Limiter == l.name {
		for _, e := range t.Entries {
			if l.byName[e.Rule] != nil {
				deposit = t.Cost
				break
			}
		}
	}
	if cost >= deposit {
		return l.Record(ctx, attrs, cost-deposit)
	}
	// Refunding gives the deposit back to l's rules only: l does not hold
	// the admission's other rules, so their entries are passed over. A
	// refund that fails leaves the rules stricter, never looser.
	_ = l.Refund(ctx, t)
	return l.Record(ctx, attrs, cost)
}
