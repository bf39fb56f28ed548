package gateway

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// maxCost is the largest cost a floodgate decision carries (2^53, the
// library's internal/algo.MaxUnits; a test keeps the two equal).
const maxCost = 1 << 53

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
			return errors.New("gateway: token class with an empty name")
		}
		if weight < 0 {
			return fmt.Errorf("gateway: token class %q: weight %d must not be negative", class, weight)
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
	if !ok || n < 0 || weight != 0 && n > (maxCost-cost)/weight {
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
			return fmt.Errorf("gateway: unknown token class %q", class)
		case n < 0:
			return fmt.Errorf("gateway: token class %q: count %d must not be negative", class, n)
		}
		break
	}
	return fmt.Errorf("gateway: weighted cost exceeds %d", int64(maxCost))
}
