// Package clocktest holds a clock that moves only when told to, for the
// tests of floodgate's packages.
package clocktest

import (
	"sync/atomic"
	"time"
)

// Manual is a clock that moves only when told to, for tests and
// simulations. It is safe for concurrent use. The zero value reads the Unix
// epoch.
type Manual struct {
	ns atomic.Int64
}

// New returns a clock reading t.
func New(t time.Time) *Manual {
	c := &Manual{}
	c.Set(t)
	return c
}

// Now returns the clock's reading.
func (c *Manual) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set moves the clock to t.
func (c *Manual) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock by d and returns the new reading.
func (c *Manual) Advance(d time.Duration) time.Time {
	return time.Unix(0, c.ns.Add(int64(d)))
}
