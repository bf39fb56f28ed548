// Package clock holds the limiters' default clock: the wall clock read at
// half the cost of time.Now.
//
// It earns its place by measurement: time.Now makes two clock reads and
// Fast.Now one, about half the cost (BenchmarkClock), and the clock is the
// largest single part of a decision on the memory store.
package clock

import (
	"math"
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

	wall func() time.Time // the wall clock; nil: time.Now (tests set it)
}

// Now returns the wall clock as of the last re-read plus the monotonic time
// since.
func (c *Fast) Now() time.Time {
	mono := nanotime()
	if last := c.sync.Load(); last == 0 || mono-last >= fastResync {
		return c.resync()
	}
	return time.Unix(0, mono+c.off.Load())
}

// maxSkew is how far apart the two monotonic readings around a wall-clock
// reading may be for the offset they give to be kept.
const maxSkew = int64(50 * time.Microsecond)

// resyncTries is how many wall-clock readings a re-read makes at most.
const resyncTries = 8

// resync re-reads the wall clock between two readings of the monotonic
// clock, and again while they are more than maxSkew apart: a reader
// descheduled between the two clocks would otherwise store an offset off
// by however long it waited (tens of milliseconds on a loaded machine),
// and every reading would be that far off until the next re-read. When
// every try is interrupted, the offset there is stays and a later reader
// tries again (the first re-read takes its best try). Readers racing here
// each store their own consistent offset; any of them is as good as the
// others.
func (c *Fast) resync() time.Time {
	wall := c.wall
	if wall == nil {
		wall = time.Now
	}
	bestGap, bestOff := int64(math.MaxInt64), int64(0)
	var bestNow time.Time
	for range resyncTries {
		before := nanotime()
		now := wall()
		after := nanotime()
		if gap := after - before; gap < bestGap {
			bestGap, bestOff, bestNow = gap, now.UnixNano()-before/2-after/2, now
		}
		if bestGap <= maxSkew {
			c.off.Store(bestOff)
			c.sync.Store(after)
			return bestNow
		}
	}
	if c.sync.Load() == 0 {
		c.off.Store(bestOff) // no offset yet: the best there is, until a later re-read
	}
	return bestNow
}
