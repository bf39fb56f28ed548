// Package scope names where a rule's state is stored: its limiter, its
// name and, for every algorithm whose state is measured in its window, the
// window.
package scope

import (
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// Of is the scope under which the state of rule of limiter is stored (the
// Scope of its store.Op): the limiter and rule names, and for every
// algorithm whose state is measured in its window, "@" and the window
// ("api/per-user@1m", "api/month@month"). A rule whose window changes (a
// unit changed on reload: 1000/second to 3000/minute and back) so starts a
// new state instead of reading the old window's: a count never carries
// into a longer window, and a shorter one never waits for an old, longer
// one to end. The old state expires on its own. A changed limit keeps the
// state. Concurrency leases keep theirs too: their window is only how long
// a lost lease lives, and a new state would forget the leases held. The
// window holds no ':', which keeps store keys apart (see store/redis).
func Of(limiter, rule string, a store.Algorithm, align store.Align, window time.Duration) string {
	s := limiter + "/" + rule
	switch {
	case a == store.Concurrency:
		return s
	case a == store.FixedWindow && align == store.AlignDay:
		return s + "@day"
	case a == store.FixedWindow && align == store.AlignMonth:
		return s + "@month"
	}
	return s + "@" + windowText(window)
}

// windowText writes d in its largest whole unit: 1s, 90s, 5m, 24h, 250ms,
// 1500us.
func windowText(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return strconv.FormatInt(d.Microseconds(), 10) + "us"
}
