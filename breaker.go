package floodgate

import (
	"sync/atomic"
	"time"
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

// breaker is a consecutive-failure circuit breaker. It is lock-free: the hot
// path of a closed breaker is one atomic load.
type breaker struct {
	failures int64
	cooldown int64 // ns

	state     atomic.Uint32
	fails     atomic.Int64
	openUntil atomic.Int64 // ns since the epoch
}

func newBreaker(o BreakerOptions) *breaker {
	b := &breaker{failures: int64(o.Failures), cooldown: int64(o.Cooldown)}
	if b.failures == 0 {
		b.failures = 5
	}
	if b.cooldown <= 0 {
		b.cooldown = int64(time.Second)
	}
	return b
}

// allow reports whether a store call may go ahead at now (ns). When the
// breaker is open and the cooldown has passed, exactly one caller becomes the
// probe.
func (b *breaker) allow(now int64) bool {
	if b.failures < 0 {
		return true
	}
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true
	case BreakerOpen:
		if now < b.openUntil.Load() {
			return false
		}
		return b.state.CompareAndSwap(uint32(BreakerOpen), uint32(BreakerHalfOpen))
	default:
		return false
	}
}

// retryIn is how long until the breaker next lets a call through.
func (b *breaker) retryIn(now int64) time.Duration {
	return time.Duration(max(0, b.openUntil.Load()-now))
}

func (b *breaker) success() {
	if b.failures < 0 {
		return
	}
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	if BreakerState(b.state.Load()) != BreakerClosed {
		b.state.Store(uint32(BreakerClosed))
	}
}

// failure records a failed call and reports whether it opened the breaker.
func (b *breaker) failure(now int64) bool {
	if b.failures < 0 {
		return false
	}
	if BreakerState(b.state.Load()) == BreakerHalfOpen || b.fails.Add(1) >= b.failures {
		b.openUntil.Store(now + b.cooldown)
		b.fails.Store(0)
		return b.state.Swap(uint32(BreakerOpen)) != uint32(BreakerOpen)
	}
	return false
}

// abandon hands back a probe whose caller gave up before the store answered:
// there is no verdict, so the breaker returns to open with its cooldown
// already over, and the next call probes again. Without this a cancelled
// probe would leave the breaker half open, refusing every call, for good.
func (b *breaker) abandon() {
	b.state.CompareAndSwap(uint32(BreakerHalfOpen), uint32(BreakerOpen))
}

func (b *breaker) current() BreakerState { return BreakerState(b.state.Load()) }
