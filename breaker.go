package floodgate

import (
	"time"

	ibreaker "github.com/floodgate-go/floodgate/internal/breaker"
)

// BreakerOptions tune the circuit breaker that guards a limiter's remote
// store. The breaker opens on an outage, not on a slow moment: when, within
// the last Window, at least Failures calls failed and they were at least
// Ratio of the calls. A stall of a few tens of milliseconds under load
// fails the calls in flight, a small share of the window's, and leaves it
// closed. Open, it answers at once (from the fallback, or by the failure
// policy), then lets one probe through after Cooldown; each failed probe
// doubles the wait, up to MaxCooldown, and a successful one closes it.
// The zero value is the defaults.
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

// check returns the ConfigError of limiter for a value out of range, or nil.
func (o BreakerOptions) check(limiter string) error {
	switch {
	case o.Ratio < 0 || o.Ratio > 1:
		return limiterError(limiter, "breaker.ratio", "must be between 0 and 1")
	case o.Window < 0:
		return limiterError(limiter, "breaker.window", "must not be negative")
	case o.Window > 0 && o.Window < 10*time.Millisecond:
		return limiterError(limiter, "breaker.window", "must be at least 10ms")
	case o.Cooldown < 0:
		return limiterError(limiter, "breaker.cooldown", "must not be negative")
	case o.MaxCooldown < 0:
		return limiterError(limiter, "breaker.max_cooldown", "must not be negative")
	case o.MaxCooldown > 0 && o.MaxCooldown < o.Cooldown:
		return limiterError(limiter, "breaker.max_cooldown", "must not be shorter than breaker.cooldown")
	}
	return nil
}

// BreakerState is the state of a limiter's circuit breaker.
type BreakerState uint8

const (
	// BreakerClosed: store calls go through.
	BreakerClosed BreakerState = iota
	// BreakerOpen: decisions are answered by the fallback or the failure
	// policy at once.
	BreakerOpen
	// BreakerHalfOpen: one probe is in flight; others are answered as when
	// open.
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

func newBreaker(o BreakerOptions) *breaker {
	return ibreaker.NewWith(ibreaker.Options{
		Failures: o.Failures, Ratio: o.Ratio, Window: o.Window, Cooldown: o.Cooldown, MaxCooldown: o.MaxCooldown,
	})
}
