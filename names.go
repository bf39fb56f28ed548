package floodgate

import (
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/floodgate-go/floodgate/store"
)

// Two limiters of one name on one store read and write the same keys. A
// second live limiter of a name a store already serves is therefore an
// error at construction, unless it has the same rules (it is then the same
// limiter, made twice: they share its keys as replicas of a service do) or
// takes over from the first (Options.Replaces: a configuration reload; a
// view made with Only). A limiter stops holding its name when it is
// closed or garbage-collected.

// nameKey is one name on one store.
type nameKey struct {
	store store.Store
	name  string
}

// nameHold is a limiter's hold on its name.
type nameHold struct {
	key    nameKey
	rules  string // the limiter's rules, as compared between holders
	lim    weak.Pointer[Limiter]
	closed atomic.Bool
}

var names = struct {
	sync.Mutex
	m map[nameKey][]*nameHold
}{m: make(map[nameKey][]*nameHold)}

// distinct reports whether store values can tell stores apart: a store of
// a type that is not comparable, or of no size (every value the same, a
// stand-in that holds nothing), takes no part in the check.
func distinct(s store.Store) bool {
	t := reflect.TypeOf(s)
	return t.Comparable() && t.Size() > 0
}

// hold registers l's name on its store, or returns the error naming the
// conflict. replaces is the limiter l takes over from, or nil.
func (l *Limiter) hold(replaces *Limiter) error {
	if !distinct(l.store) {
		return nil
	}
	h := &nameHold{key: nameKey{l.store, l.name}, rules: l.describeRules(), lim: weak.Make(l)}
	names.Lock()
	defer names.Unlock()
	ok := replaces != nil && replaces.held != nil && replaces.held.key == h.key
	live := names.m[h.key][:0]
	for _, o := range names.m[h.key] {
		if o.lim.Value() != nil && !o.closed.Load() {
			live = append(live, o)
			ok = ok || o.rules == h.rules
		}
	}
	names.m[h.key] = live
	if !ok && len(live) > 0 {
		return limiterError(l.name, "name", "another live limiter of this name uses the store with other rules, so the two would share its keys; Close it first, or pass it as Options.Replaces to take over its keys (a configuration reload)")
	}
	names.m[h.key] = append(live, h)
	l.held = h
	// The table must not keep a store alive after its limiters are gone.
	runtime.AddCleanup(l, release, h)
	return nil
}

// release drops h from the table, and its name's entry once it is empty.
func release(h *nameHold) {
	names.Lock()
	defer names.Unlock()
	hs := names.m[h.key]
	for i, o := range hs {
		if o == h {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(names.m, h.key)
	} else {
		names.m[h.key] = hs
	}
}

// Close gives up the limiter's name on its store, so that a limiter of the
// same name with other rules can be made there. The limiter still answers;
// Close releases no connection (the store has its own Close).
func (l *Limiter) Close() error {
	if l.held != nil && !l.held.closed.Swap(true) {
		release(l.held)
	}
	return nil
}

// describeRules is what two limiters of one name must agree on to share a
// store: every rule as compiled, and whether the limiter runs dark.
func (l *Limiter) describeRules() string {
	var b strings.Builder
	b.WriteString(sprintf("shadow=%v", l.shadow))
	for _, c := range l.rules {
		loc := ""
		if c.Location != nil {
			loc = c.Location.String()
		}
		b.WriteString(sprintf(";%s %v %+v %s key=%q keyfunc=%v limitfunc=%v overrides=%v shadow=%v",
			c.Name, c.Algorithm, c.params, loc, c.Key, c.KeyFunc != nil, c.LimitFunc != nil, c.Overrides, c.Shadow))
	}
	return b.String()
}
