// Package breaker is the consecutive-failure circuit breaker that guards a
// limiter's store and, in a Redis Cluster store, each master.
package breaker

import (
	"sync/atomic"
	"time"
)

// State is a breaker's state. The values are those of
// floodgate.BreakerState.
type State uint8

const (
	// Closed: calls go through.
	Closed State = iota
	// Open: calls are refused until the cooldown has passed.
	Open
	// HalfOpen: one probe is in flight; other calls are refused.
	HalfOpen
)

// Breaker is a consecutive-failure circuit breaker. It is lock-free: the
// hot path of a closed breaker is one atomic load. Times are ns since the
// epoch.
type Breaker struct {
	failures int64
	cooldown int64 // ns

	state     atomic.Uint32
	fails     atomic.Int64
	openUntil atomic.Int64
}

// New returns a closed breaker that opens after failures consecutive
// failures (0 means 5; negative disables it: it never opens) and stays open
// for cooldown (0 or less means 1s) before it lets one probe through.
func New(failures int, cooldown time.Duration) *Breaker {
	b := &Breaker{failures: int64(failures), cooldown: int64(cooldown)}
	if b.failures == 0 {
		b.failures = 5
	}
	if b.cooldown <= 0 {
		b.cooldown = int64(time.Second)
	}
	return b
}

// Allow reports whether a call may go ahead at now. When the breaker is
// open and the cooldown has passed, exactly one caller becomes the probe.
func (b *Breaker) Allow(now int64) bool {
	if b.failures < 0 {
		return true
	}
	switch State(b.state.Load()) {
	case Closed:
		return true
	case Open:
		if now < b.openUntil.Load() {
			return false
		}
		return b.state.CompareAndSwap(uint32(Open), uint32(HalfOpen))
	default:
		return false
	}
}

// RetryIn is how long until the breaker next lets a call through.
func (b *Breaker) RetryIn(now int64) time.Duration {
	return time.Duration(max(0, b.openUntil.Load()-now))
}

// Success records a call that succeeded and reports whether it closed the
// breaker.
func (b *Breaker) Success() bool {
	if b.failures < 0 {
		return false
	}
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	if State(b.state.Load()) != Closed {
		return b.state.Swap(uint32(Closed)) != uint32(Closed)
	}
	return false
}

// Failure records a failed call at now and reports whether it opened the
// breaker.
func (b *Breaker) Failure(now int64) bool {
	if b.failures < 0 {
		return false
	}
	if State(b.state.Load()) == HalfOpen || b.fails.Add(1) >= b.failures {
		b.openUntil.Store(now + b.cooldown)
		b.fails.Store(0)
		return b.state.Swap(uint32(Open)) != uint32(Open)
	}
	return false
}

// Abandon hands back a probe that brought no verdict (its caller gave up
// before the store answered): the breaker returns to open with its
// cooldown already over, and the next call probes again. Without this a
// cancelled probe would leave the breaker half open, refusing every call,
// for good. It does nothing to a breaker that is not half open.
func (b *Breaker) Abandon() {
	b.state.CompareAndSwap(uint32(HalfOpen), uint32(Open))
}

// State returns the breaker's state.
func (b *Breaker) State() State { return State(b.state.Load()) }
