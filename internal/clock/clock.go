// Package clock holds the limiters' default clock: the wall clock read at
// half the cost of time.Now.
//
// It earns its place by measurement: time.Now makes two clock reads and
// Fast.Now one, about half the cost (BenchmarkClock), and the clock is the
// largest single part of a decision on the memory store.
package clock

import (
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname of runtime.nanotime
)

// nanotime is the runtime's monotonic clock in nanoseconds: one vDSO clock
// read, where time.Now makes two (wall and monotonic) and builds a Time with
// a monotonic reading. runtime.nanotime is one of the runtime symbols Go
// keeps open to go:linkname.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// fastResync is how often Fast re-reads the wall clock.
const fastResync = int64(time.Second)

// Fast is the wall clock read cheaply: the runtime's monotonic clock
// plus an offset to the wall clock that is re-read with time.Now at most once
// a second, by whichever reader notices the second has passed.
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
type Fast struct {
	off  atomic.Int64 // wall − monotonic, ns
	sync atomic.Int64 // monotonic time of the last re-read, ns; 0: never
}

// Now returns the wall clock as of the last re-read plus the monotonic time
// since.
func (c *Fast) Now() time.Time {
	mono := nanotime()
	if last := c.sync.Load(); last == 0 || mono-last >= fastResync {
		return c.resync(mono)
	}
	return time.Unix(0, mono+c.off.Load())
}

// resync re-reads the wall clock. Readers racing here each store their own
// consistent offset; any of them is as good as the others.
func (c *Fast) resync(mono int64) time.Time {
	now := time.Now()
	c.off.Store(now.UnixNano() - mono)
	c.sync.Store(mono)
	return now
}
