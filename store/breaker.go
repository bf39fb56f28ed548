package store

import (
	"errors"
	"time"
)

// BreakerOptions tune a circuit breaker that guards a remote store
// (store/guard) or a part of one (each master of a Redis Cluster). The
// breaker opens on an outage, not on a slow moment: when, within the last
// Window, at least Failures calls failed and they were at least Ratio of
// the calls. A stall of a few tens of milliseconds under load fails the
// calls in flight, a small share of the window's, and leaves it closed.
// Open, it refuses calls at once, then lets one probe through after
// Cooldown; each failed probe doubles the wait, up to MaxCooldown, and a
// successful one closes it. The zero value is the defaults.
type BreakerOptions struct {
	// Failures is the fewest failures within Window that open the breaker
	// (a minimum volume); 0 means 5, a negative value disables the breaker.
	Failures int
	// Ratio is the share of the calls within Window that must have failed,
	// in (0, 1]; 0 means 0.5.
	Ratio float64
	// Window is the span of recent calls judged; 0 means 1s.
	Window time.Duration
	// Cooldown is how long the breaker stays open before its first probe;
	// 0 means 250ms.
	Cooldown time.Duration
	// MaxCooldown caps the doubling wait between failed probes; 0 means 4
	// times Cooldown (1s by default).
	MaxCooldown time.Duration
}

// Check returns an error naming the field of a value out of range, such
// as "breaker.ratio: must be between 0 and 1", or nil.
func (o BreakerOptions) Check() error {
	bad := func(field, reason string) error { return &FieldError{Field: "breaker." + field, Reason: reason} }
	switch {
	case o.Ratio < 0 || o.Ratio > 1:
		return bad("ratio", "must be between 0 and 1")
	case o.Window < 0:
		return bad("window", "must not be negative")
	case o.Window > 0 && o.Window < 10*time.Millisecond:
		return bad("window", "must be at least 10ms")
	case o.Cooldown < 0:
		return bad("cooldown", "must not be negative")
	case o.MaxCooldown < 0:
		return bad("max_cooldown", "must not be negative")
	case o.MaxCooldown > 0 && o.MaxCooldown < o.Cooldown:
		return bad("max_cooldown", "must not be shorter than breaker.cooldown")
	}
	return nil
}

// FieldError is an option out of range: the field, as a configuration
// names it, and what is wrong with it.
type FieldError struct {
	Field  string
	Reason string
}

// Error returns "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// BreakerState is the state of a circuit breaker.
type BreakerState uint8

const (
	// BreakerClosed: store calls go through.
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls are refused at once.
	BreakerOpen
	// BreakerHalfOpen: one probe is in flight; other calls are refused
	// as when open.
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

// ErrBreakerOpen is the error of a call refused because a circuit breaker
// is open.
var ErrBreakerOpen = errors.New("store circuit breaker open")

// RetryError is a store failure that says when the store is next tried:
// a call a circuit breaker refused (Err is ErrBreakerOpen), or the failure
// that opened it. A limiter that fails closed tells its callers to retry
// then (at least a second later).
type RetryError struct {
	Err     error
	RetryIn time.Duration
}

// Error returns Err's message.
func (e *RetryError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *RetryError) Unwrap() error { return e.Err }
