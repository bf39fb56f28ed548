package floodgate

import (
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
