package floodgate

import (
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/clock"
)

// Clock tells the time. Limiters read it once per decision.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock: every reading is a full time.Now. Use it
// when decisions must see a step of the system clock at once; the default
// clock of a limiter (when Options.Clock is nil) reads the wall clock at
// half the cost, a step of it up to a second late (see Options.Clock).
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// defaultClock is the clock of limiters whose Options leave Clock nil.
var defaultClock = new(clock.Fast)

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
