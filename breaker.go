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

// ConfinedError is a store failure confined to a part of the store, such as
// one master of a Redis Cluster, that the store isolates itself (with a
// breaker per part). The decision is answered by the failure policy, but
// the limiter's own breaker does not count the failure, so decisions whose
// keys live on the healthy parts go on being decided by the rules.
type ConfinedError struct {
	// Part names the part that failed, such as a node's address.
	Part string
	// Err is the failure.
	Err error
}

// Error returns Err's message.
func (e *ConfinedError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ConfinedError) Unwrap() error { return e.Err }
