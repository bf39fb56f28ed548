package topkeys

import (
	"sync"
	"sync/atomic"
	"time"
)

// wallMinute is the wall clock's minute since the Unix epoch, kept by one
// goroutine that reads the clock every second from the first call on: a
// tracker without a Clock places events in minutes with an atomic load
// instead of a clock read per decision, which on a virtual machine can cost
// a tenth of a decision. A minute therefore starts up to a second late.
func wallMinute() int64 {
	wall.once.Do(func() {
		wall.minute.Store(minuteOf(time.Now()))
		go func() {
			for now := range time.Tick(time.Second) {
				wall.minute.Store(minuteOf(now))
			}
		}()
	})
	return wall.minute.Load()
}

var wall struct {
	once   sync.Once
	minute atomic.Int64
}

func minuteOf(now time.Time) int64 { return now.Unix() / 60 }
