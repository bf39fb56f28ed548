package floodgate

import (
	"sync/atomic"
	"time"
)

// Clock tells the time. Limiters read it once per decision.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ManualClock is a clock that moves only when told to, for tests and
// simulations. It is safe for concurrent use. The zero value reads the Unix
// epoch.
type ManualClock struct {
	ns atomic.Int64
}

// NewManualClock returns a clock reading t.
func NewManualClock(t time.Time) *ManualClock {
	c := &ManualClock{}
	c.Set(t)
	return c
}

// Now returns the clock's reading.
func (c *ManualClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t.
func (c *ManualClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock by d and returns the new reading.
func (c *ManualClock) Advance(d time.Duration) time.Time {
	return time.Unix(0, c.ns.Add(int64(d)))
}
