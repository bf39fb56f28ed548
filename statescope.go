package floodgate

import (
	"strconv"
	"time"
)

// stateScope is the scope under which a rule's state is stored: the
// limiter and rule names, and for every algorithm whose state is measured
// in its window, "@" and the window ("api/per-user@1m", "api/month@month").
// A rule whose window changes (a unit changed on reload: 1000/second to
// 3000/minute and back) so starts a new state instead of reading the old
// window's: a count never carries into a longer window, and a shorter one
// never waits for an old, longer one to end. The old state expires on its
// own. A changed limit keeps the state. Concurrency leases keep theirs too:
// their window is only how long a lost lease lives, and a new state would
// forget the leases held. The window holds no ':', which keeps store keys
// apart (see store/redis).
func stateScope(limiter string, r Rule) string {
	scope := limiter + "/" + r.Name
	switch {
	case r.Algorithm == Concurrency:
		return scope
	case r.Algorithm == FixedWindow && r.Align == AlignDay:
		return scope + "@day"
	case r.Algorithm == FixedWindow && r.Align == AlignMonth:
		return scope + "@month"
	}
	return scope + "@" + windowText(r.Window)
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

// StateScope returns the scope under which the named rule's state is
// stored (the Scope of its store.Op, such as "api/per-user@1m"), and
// whether the limiter has that rule. With a store's key layout it names the
// rule's keys: in Redis, prefix + "{" + scope + ":" + key + "}:fixed" (see
// docs/redis.md).
func (l *Limiter) StateScope(rule string) (string, bool) {
	c := l.byName[rule]
	if c == nil {
		return "", false
	}
	return c.scope, true
}
