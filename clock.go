package floodgate

import (
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname of runtime.nanotime
)

// Clock tells the time. Limiters read it once per decision.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock: every reading is a full time.Now. Use it
// when decisions must see a step of the system clock at once; the default
// clock of a limiter (when Options.Clock is nil) is a FastClock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// nanotime is the runtime's monotonic clock in nanoseconds: one vDSO clock
// read, where time.Now makes two (wall and monotonic) and builds a Time with
// a monotonic reading. runtime.nanotime is one of the runtime symbols Go
// keeps open to go:linkname.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// fastResync is how often a FastClock re-reads the wall clock.
const fastResync = int64(time.Second)

// FastClock is the wall clock read cheaply: the runtime's monotonic clock
// plus an offset to the wall clock that is re-read with time.Now at most once
// a second, by whichever reader notices the second has passed. A reading
// costs about 20 ns less than time.Now.
//
// The trade-off: a step of the system clock (settimeofday, an NTP step) is
// seen up to one second late, and when it is seen the readings jump by the
// step, backwards too (the stores treat time going back as no time passing,
// as they do with SystemClock). Between re-reads the readings follow the
// monotonic clock, which NTP slews at the same rate as the wall clock, so
// otherwise they differ from time.Now by the slew of one second (at most
// half a millisecond, in practice microseconds). Fixed windows aligned to
// the clock or the calendar therefore open within that error of the wall
// clock's boundaries. The readings carry no monotonic reading (as those of
// time.Unix).
//
// The zero value is ready to use and safe for concurrent use.
type FastClock struct {
	off  atomic.Int64 // wall − monotonic, ns
	sync atomic.Int64 // monotonic time of the last re-read, ns; 0: never
}

// Now returns the wall clock as of the last re-read plus the monotonic time
// since.
func (c *FastClock) Now() time.Time {
	mono := nanotime()
	if last := c.sync.Load(); last == 0 || mono-last >= fastResync {
		return c.resync(mono)
	}
	return time.Unix(0, mono+c.off.Load())
}

// resync re-reads the wall clock. Readers racing here each store their own
// consistent offset; any of them is as good as the others.
func (c *FastClock) resync(mono int64) time.Time {
	now := time.Now()
	c.off.Store(now.UnixNano() - mono)
	c.sync.Store(mono)
	return now
}

// defaultClock is the clock of limiters whose Options leave Clock nil.
var defaultClock = new(FastClock)

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
