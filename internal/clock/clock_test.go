package clock

import (
	"testing"
	"time"
)

// Fast must agree with time.Now to well within a millisecond, on its
// first reading (a re-read) and on later ones (monotonic plus offset).
func TestFastClockTracksWallClock(t *testing.T) {
	var c Fast
	for i := range 1000 {
		before := time.Now()
		got := c.Now()
		after := time.Now()
		if got.Before(before.Add(-time.Millisecond)) || got.After(after.Add(time.Millisecond)) {
			t.Fatalf("reading %d: %v not within 1ms of [%v, %v]", i, got, before, after)
		}
	}
}

// A re-read happens once the resync interval has passed.
func TestFastClockResyncs(t *testing.T) {
	var c Fast
	c.Now()
	first := c.sync.Load()
	c.sync.Store(first - fastResync) // pretend a second has passed
	c.Now()
	if c.sync.Load() <= first-fastResync {
		t.Fatal("no re-read after the resync interval")
	}
	// A stale offset (as after a wall-clock step) is replaced at the re-read.
	c.off.Add(int64(time.Hour))
	c.sync.Store(c.sync.Load() - fastResync)
	if d := time.Until(c.Now()); d > time.Millisecond || d < -time.Millisecond {
		t.Fatalf("after a re-read the clock is %v off", d)
	}
}

// A reader descheduled while it re-reads the wall clock does not leave the
// clock off by its wait: the offset used to be the wall clock read after
// the wait less the monotonic clock read before it, and every reading for
// the next second was that far ahead (60 ms seen under load).
func TestFastClockResyncIgnoresAWait(t *testing.T) {
	waits := 1
	c := Fast{wall: func() time.Time {
		if waits > 0 {
			waits--
			time.Sleep(30 * time.Millisecond) // descheduled between the clocks
		}
		return time.Now()
	}}
	c.Now()
	if d := time.Until(c.Now()); d > time.Millisecond || d < -time.Millisecond {
		t.Fatalf("after a re-read that waited 30ms the clock is %v off", d)
	}
}

// A re-read whose every try is interrupted keeps the offset there is: a
// bad one never replaces a good one.
func TestFastClockKeepsItsOffsetWhenEveryTryWaits(t *testing.T) {
	var c Fast
	c.Now() // a good offset
	c.wall = func() time.Time {
		time.Sleep(2 * time.Millisecond)
		return time.Now()
	}
	c.sync.Store(c.sync.Load() - fastResync) // a second has passed
	c.Now()
	c.wall = nil
	if d := time.Until(c.Now()); d > 500*time.Microsecond || d < -500*time.Microsecond {
		t.Fatalf("after a re-read whose every try waited, the clock is %v off", d)
	}
}

// BenchmarkClock is what a reading costs against time.Now: the reason Fast
// exists.
func BenchmarkClock(b *testing.B) {
	var sink int64
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			sink += time.Now().UnixNano()
		}
	})
	b.Run("Fast", func(b *testing.B) {
		var c Fast
		for b.Loop() {
			sink += c.Now().UnixNano()
		}
	})
	_ = sink
}
