// Package breaker is the circuit breaker that guards a limiter's store
// and, in a Redis Cluster store, each master: it opens when a share of the
// recent calls failed, not on a few slow ones, and comes back through
// single probes at growing intervals.
package breaker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// State is a breaker's state.
type State = store.BreakerState

// The states.
const (
	Closed   = store.BreakerClosed
	Open     = store.BreakerOpen
	HalfOpen = store.BreakerHalfOpen
)

// Defaults of Options.
const (
	DefaultFailures = 5
	DefaultRatio    = 0.5
	DefaultWindow   = time.Second
	DefaultCooldown = 250 * time.Millisecond
)

// maxCooldownFactor makes the longest cooldown, when MaxCooldown is 0:
// 4 times Cooldown.
const maxCooldownFactor = 4

// buckets is how many parts the window is counted in: the window slides
// by a tenth.
const buckets = 10

// Options tune a Breaker (see store.BreakerOptions).
type Options = store.BreakerOptions

// Breaker is a failure-ratio circuit breaker. It is safe for concurrent
// use and lock-free but for the turn of a bucket (once a tenth of the
// window): the hot path of a closed breaker is an atomic load in Allow and
// an atomic add in Success. Times are ns since the epoch.
type Breaker struct {
	failures          int64
	ratio             float64
	width             int64 // ns per bucket
	cooldown, maxCool int64 // ns
	disabled          bool
	state             atomic.Uint32
	openUntil         atomic.Int64
	backoff           atomic.Int64 // the cooldown of the next reopening
	cur               atomic.Int64 // the current bucket's number (time / width)
	turn              sync.Mutex   // held to turn buckets
	calls, fails      [buckets]atomic.Int64
	bucketOf          [buckets]atomic.Int64 // which bucket number each slot holds
}

// New returns a closed breaker that opens after failures failures in the
// default window, at the default ratio (see Options), with cooldown as its
// first cooldown.
func New(failures int, cooldown time.Duration) *Breaker {
	return NewWith(Options{Failures: failures, Cooldown: cooldown})
}

// NewWith returns a closed breaker tuned by o. Values out of range are
// replaced by the defaults; callers validate them first (store.BreakerOptions.Check).
func NewWith(o Options) *Breaker {
	b := &Breaker{failures: int64(o.Failures), ratio: o.Ratio, disabled: o.Failures < 0}
	if b.failures == 0 {
		b.failures = DefaultFailures
	}
	if b.ratio <= 0 || b.ratio > 1 {
		b.ratio = DefaultRatio
	}
	window := o.Window
	if window <= 0 {
		window = DefaultWindow
	}
	b.width = max(1, int64(window)/buckets)
	b.cooldown = int64(o.Cooldown)
	if b.cooldown <= 0 {
		b.cooldown = int64(DefaultCooldown)
	}
	b.maxCool = int64(o.MaxCooldown)
	if b.maxCool <= 0 {
		b.maxCool = b.cooldown * maxCooldownFactor
	}
	b.maxCool = max(b.maxCool, b.cooldown)
	b.backoff.Store(b.cooldown)
	return b
}

// Allow reports whether a call may go ahead at now. When the breaker is
// open and the cooldown has passed, exactly one caller becomes the probe.
func (b *Breaker) Allow(now int64) bool {
	if b.disabled {
		return true
	}
	switch State(b.state.Load()) {
	case Closed:
		b.tick(now)
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

// tick moves the current bucket to now's, clearing the buckets it passes.
func (b *Breaker) tick(now int64) {
	n := now / b.width
	if n <= b.cur.Load() {
		return // the same bucket, or a clock that stepped back
	}
	b.turn.Lock()
	defer b.turn.Unlock()
	cur := b.cur.Load()
	if n <= cur {
		return
	}
	for i := max(cur+1, n-buckets+1); i <= n; i++ {
		s := i % buckets
		b.calls[s].Store(0)
		b.fails[s].Store(0)
		b.bucketOf[s].Store(i)
	}
	b.cur.Store(n)
}

// RetryIn is how long until the breaker next lets a call through.
func (b *Breaker) RetryIn(now int64) time.Duration {
	return time.Duration(max(0, b.openUntil.Load()-now))
}

// Success records a call that succeeded and reports whether it closed the
// breaker.
func (b *Breaker) Success() bool {
	if b.disabled {
		return false
	}
	b.calls[b.cur.Load()%buckets].Add(1)
	if State(b.state.Load()) == Closed {
		return false
	}
	if b.state.Swap(uint32(Closed)) == uint32(Closed) {
		return false
	}
	b.backoff.Store(b.cooldown)
	b.clear()
	return true
}

// clear forgets the counts: a breaker that has just closed judges the
// calls from then on.
func (b *Breaker) clear() {
	b.turn.Lock()
	defer b.turn.Unlock()
	for s := range buckets {
		b.calls[s].Store(0)
		b.fails[s].Store(0)
	}
}

// Failure records a failed call at now and reports whether it opened the
// breaker: a failed probe reopens it for twice the last cooldown (up to
// the longest), and a closed breaker opens when the window holds at least
// Failures failures making at least Ratio of its calls.
func (b *Breaker) Failure(now int64) bool {
	if b.disabled {
		return false
	}
	switch State(b.state.Load()) {
	case HalfOpen:
		next := min(b.backoff.Load()*2, b.maxCool)
		b.backoff.Store(next)
		b.openUntil.Store(now + next)
		return b.state.Swap(uint32(Open)) != uint32(Open)
	case Open:
		return false // a call that went out before the breaker opened
	}
	b.tick(now)
	s := b.cur.Load() % buckets
	b.calls[s].Add(1)
	b.fails[s].Add(1)
	calls, fails := b.counts()
	if fails < b.failures || float64(fails) < b.ratio*float64(calls) {
		return false
	}
	b.backoff.Store(b.cooldown)
	b.openUntil.Store(now + b.cooldown)
	return b.state.Swap(uint32(Open)) != uint32(Open)
}

// counts sums the window's calls and failures.
func (b *Breaker) counts() (calls, fails int64) {
	cur := b.cur.Load()
	for s := range buckets {
		if n := b.bucketOf[s].Load(); n > cur-buckets && n <= cur {
			calls += b.calls[s].Load()
			fails += b.fails[s].Load()
		}
	}
	return calls, fails
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
