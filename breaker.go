package floodgate

import (
	"time"

	ibreaker "github.com/floodgate-go/floodgate/internal/breaker"
)

// BreakerOptions tune the circuit breaker that guards a limiter's store.
type BreakerOptions struct {
	// Failures is how many consecutive store failures open the breaker;
	// 0 means 5, a negative value disables the breaker.
	Failures int
	// Cooldown is how long the breaker stays open before it lets one probe
	// through; 0 means 1s.
	Cooldown time.Duration
}

// BreakerState is the state of a limiter's circuit breaker.
type BreakerState uint8

const (
	// BreakerClosed: store calls go through.
	BreakerClosed BreakerState = iota
	// BreakerOpen: decisions are answered by the failure policy at once.
	BreakerOpen
	// BreakerHalfOpen: one probe is in flight; others are answered by policy.
	BreakerHalfOpen
)

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "unknown"
}

// breaker guards a limiter's store.
type breaker = ibreaker.Breaker

func newBreaker(o BreakerOptions) *breaker { return ibreaker.New(o.Failures, o.Cooldown) }
