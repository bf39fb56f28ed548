package topkeys

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults and limits of a Tracker.
const (
	// DefaultCapacity is how many keys a Tracker tracks by default per
	// limiter, rule, kind and minute.
	DefaultCapacity = 512
	// MaxSpan is the longest span Top reports over.
	MaxSpan = 15 * time.Minute
	// MaxKeyLen is the longest key kept as it is; a longer key is kept as
	// its first MaxKeyLen−17 bytes, '~' and 16 hex digits of its hash.
	MaxKeyLen = 256
)

// ringMinutes is how many per-minute summaries a rule keeps: MaxSpan and
// the current minute.
const ringMinutes = int(MaxSpan/time.Minute) + 1

// Kind says which events a summary counts.
type Kind uint8

const (
	// Denials counts the decisions a rule denied (for a shadow rule, would
	// have denied). Store failures are not a rule's denials.
	Denials Kind = iota
	// Decisions counts every decision a rule took part in.
	Decisions
)

// String returns "denials" or "decisions".
func (k Kind) String() string {
	if k == Decisions {
		return "decisions"
	}
	return "denials"
}

// Options are a Tracker's optional settings. The zero value is ready to use.
type Options struct {
	// Capacity is how many keys are tracked per limiter, rule, kind and
	// minute; 0 means DefaultCapacity. Memory is bounded by Capacity (see
	// Tracker), and counts are exact while a rule sees at most Capacity
	// distinct keys in a minute.
	Capacity int
	// Clock is the time of Add and of the reports; nil means the wall
	// clock. Observe places a decision at the Event's Time, read by the
	// limiter already.
	Clock floodgate.Clock
}

// Tracker keeps, for every limiter and rule it observes, a ring of
// per-minute summaries of the keys with the most denials and decisions, and
// merges them when asked. It is safe for concurrent use.
//
// Each summary holds at most Capacity keys and a filter of 4–8×Capacity
// counters: per rule, memory is at most 2 kinds × 16 minutes × Capacity keys
// (about 200 bytes per key, its bytes included, keys being at most
// MaxKeyLen bytes), whatever the number of distinct keys. A rule's memory is
// allocated when it is first observed, a minute's when the minute is.
//
// The error of a count is what the summaries could not tell apart: the
// count a key had when it replaced another in a minute's summary, or, in a
// minute where it is not tracked, the count of its filter counter, which
// it shares with the other untracked keys that hash to it. A key that
// makes up a good share of a minute's events is tracked from its first
// events and keeps an error near 0.
type Tracker struct {
	capacity int
	clock    floodgate.Clock
	seed     maphash.Seed

	mu    sync.Mutex                  // serializes changes to rules
	rules atomic.Pointer[[]*ruleTops] // copied on write, under mu
}

// ruleTops are one limiter's rule's per-minute summaries.
type ruleTops struct {
	limiter, name string
	mu            sync.Mutex
	ring          [ringMinutes]minute // guarded by mu
}

// minute is one minute's summaries; denials is made at the minute's first
// denial.
type minute struct {
	at        int64 // minutes since the Unix epoch
	decisions *summary
	denials   *summary
}

// New returns a Tracker. opts may be nil.
func New(opts *Options) *Tracker {
	t := &Tracker{capacity: DefaultCapacity, seed: maphash.MakeSeed()}
	if opts != nil {
		if opts.Capacity > 0 {
			t.capacity = opts.Capacity
		}
		t.clock = opts.Clock
	}
	t.rules.Store(&[]*ruleTops{})
	return t
}

// now returns the clock's time.
func (t *Tracker) now() time.Time {
	if t.clock == nil {
		return time.Now()
	}
	return t.clock.Now()
}

func minuteOf(now time.Time) int64 { return now.Unix() / 60 }

// Observe counts one decision: it is a floodgate.Observer, and allocates
// nothing. Consume and peek decisions count, records do not. Every rule of
// the decision counts e.Weight decisions for its key (a limiter's
// ObserveSample, see floodgate.Options, makes one Event stand for
// several), and as many denials when it denied.
func (t *Tracker) Observe(_ context.Context, e floodgate.Event) {
	if e.Mode != floodgate.ModeConsume && e.Mode != floodgate.ModePeek {
		return
	}
	at := e.Time
	if at.IsZero() { // an Event a caller made: every rule in this minute
		at = t.now()
	}
	m, w := minuteOf(at), max(e.Weight, 1)
	for _, r := range e.Rules() {
		t.rule(e.Limiter, r.Rule).add(t, m, r.Key, w, r.Denied && !r.Failed)
	}
}

// Add counts one decision of limiter's rule for key, and a denial when
// denied, at the clock's time. It is Observe for one rule, for callers that
// see decisions some other way.
func (t *Tracker) Add(limiter, rule, key string, denied bool) {
	t.rule(limiter, rule).add(t, minuteOf(t.now()), key, 1, denied)
}

// rule returns the entry of limiter's rule, making it on first use. A
// configuration has a handful of limiters, each with a handful of rules,
// and their names are the same strings decision after decision (equal
// pointers compare at once), so a scan beats a map.
func (t *Tracker) rule(limiter, name string) *ruleTops {
	if rt := t.find(limiter, name); rt != nil {
		return rt
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if rt := t.find(limiter, name); rt != nil {
		return rt
	}
	rt := &ruleTops{limiter: limiter, name: name}
	for i := range rt.ring {
		rt.ring[i].at = -1
	}
	old := *t.rules.Load()
	rules := append(append(make([]*ruleTops, 0, len(old)+1), old...), rt)
	t.rules.Store(&rules)
	return rt
}

// Retain forgets every limiter's rule for which keep returns false, and
// its memory: call it when limiters or rules go away (a configuration
// reload), so that a Tracker's memory follows the rules in use.
func (t *Tracker) Retain(keep func(limiter, rule string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var rules []*ruleTops
	for _, rt := range *t.rules.Load() {
		if keep(rt.limiter, rt.name) {
			rules = append(rules, rt)
		}
	}
	t.rules.Store(&rules)
}

// find returns the rule's entry, or nil when it was never observed.
func (t *Tracker) find(limiter, rule string) *ruleTops {
	for _, rt := range *t.rules.Load() {
		if rt.name == rule && rt.limiter == limiter {
			return rt
		}
	}
	return nil
}

// keyOf returns the key as kept, and its hash.
func (t *Tracker) keyOf(key string) (string, uint64) {
	h := maphash.String(t.seed, key)
	if len(key) > MaxKeyLen {
		var buf [MaxKeyLen]byte
		b := append(buf[:0], key[:MaxKeyLen-17]...)
		b = append(b, '~')
		for s := 60; s >= 0; s -= 4 {
			b = append(b, "0123456789abcdef"[h>>uint(s)&0xf])
		}
		key = string(b)
		h = maphash.String(t.seed, key)
	}
	return key, h
}

// add counts w decisions of key in minute at, and w denials when denied.
func (rt *ruleTops) add(t *Tracker, at int64, key string, w int64, denied bool) {
	key, h := t.keyOf(key)
	at = max(at, 0) // a clock before 1970 counts into the first minute
	rt.mu.Lock()
	m := &rt.ring[at%int64(ringMinutes)]
	if m.at != at {
		if m.at > at { // the clock went back: count into the newest minute
			rt.mu.Unlock()
			return
		}
		m.at = at
		if m.decisions == nil {
			m.decisions = newSummary(t.capacity)
		} else {
			m.decisions.reset()
		}
		if m.denials != nil {
			m.denials.reset()
		}
	}
	m.decisions.add(key, h, w)
	if denied {
		if m.denials == nil {
			m.denials = newSummary(t.capacity)
		}
		m.denials.add(key, h, w)
	}
	rt.mu.Unlock()
}

// Entry is one key of a Report. Its true count over the report's span lies
// between Count−Error and Count.
//
// Where Events stood for S decisions each (a limiter sampling 1 in S, see
// floodgate.Options.ObserveSample), Count is the sample's count scaled by
// S, and Error adds to the summaries' error four standard deviations of the
// sampling, 4·√((Count+S)·(S−1)): the true count lies within Count ± Error,
// but for about one entry in 15,000.
type Entry struct {
	Key   string
	Count int64
	Error int64
}

// Report is the heaviest keys of a rule over a span.
type Report struct {
	// Entries are the keys by guaranteed count (Count−Error), then Count,
	// highest first, then by key.
	Entries []Entry
	// Total is how many events the span counted, over all keys (for
	// sampled Decisions, an estimate).
	Total int64
	// Since is the start of the oldest minute the span covers: a span of
	// n minutes covers the current minute and the n before it, so between
	// n and n+1 minutes up to now.
	Since time.Time
}

// ErrSpan is returned by Top for a span outside (0, MaxSpan].
var ErrSpan = errors.New("topkeys: span must be more than 0 and at most " + strconv.Itoa(int(MaxSpan/time.Minute)) + "m")

// Top returns the n keys of limiter's rule with the most events of kind
// over span (rounded up to whole minutes), as of the clock's time. A rule
// never observed has an empty report.
func (t *Tracker) Top(limiter, rule string, kind Kind, span time.Duration, n int) (Report, error) {
	now := t.now()
	return t.TopAt(now, limiter, rule, kind, span, n)
}

// TopAt is Top as of now.
func (t *Tracker) TopAt(now time.Time, limiter, rule string, kind Kind, span time.Duration, n int) (Report, error) {
	first, last, err := minutes(now, span)
	if err != nil {
		return Report{}, err
	}
	r := Report{Since: time.Unix(first*60, 0)}
	rt := t.find(limiter, rule)
	if rt == nil || n <= 0 {
		return r, nil
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	sums := rt.summaries(first, last, kind)
	seen := map[string]bool{}
	for _, s := range sums {
		r.Total += s.total
		for i := range s.slots {
			sl := &s.slots[i]
			if seen[sl.key] {
				continue
			}
			seen[sl.key] = true
			r.Entries = append(r.Entries, estimate(sums, sl.key, sl.hash))
		}
	}
	sort.Slice(r.Entries, func(i, j int) bool {
		a, b := r.Entries[i], r.Entries[j]
		if ga, gb := a.Count-a.Error, b.Count-b.Error; ga != gb {
			return ga > gb
		}
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		return a.Key < b.Key
	})
	if len(r.Entries) > n {
		r.Entries = r.Entries[:n:n]
	}
	return r, nil
}

// Count returns key's count of kind over span, as Top would report it,
// whether or not the key is among the top ones.
func (t *Tracker) Count(limiter, rule string, kind Kind, span time.Duration, key string) (Entry, error) {
	now := t.now()
	return t.CountAt(now, limiter, rule, kind, span, key)
}

// CountAt is Count as of now.
func (t *Tracker) CountAt(now time.Time, limiter, rule string, kind Kind, span time.Duration, key string) (Entry, error) {
	first, last, err := minutes(now, span)
	if err != nil {
		return Entry{}, err
	}
	key, h := t.keyOf(key)
	rt := t.find(limiter, rule)
	if rt == nil {
		return Entry{Key: key}, nil
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return estimate(rt.summaries(first, last, kind), key, h), nil
}

// minutes checks span and returns the first and last minute it covers as
// of now: the current minute and the span's whole minutes before it.
func minutes(now time.Time, span time.Duration) (first, last int64, err error) {
	if span <= 0 || span > MaxSpan {
		return 0, 0, ErrSpan
	}
	last = minuteOf(now)
	return last - int64((span+time.Minute-1)/time.Minute), last, nil
}

// summaries returns the summaries of kind of the minutes from first to
// last that have any. It requires rt.mu.
func (rt *ruleTops) summaries(first, last int64, kind Kind) []*summary {
	var sums []*summary
	for a := max(first, 0); a <= last; a++ {
		m := &rt.ring[a%int64(ringMinutes)]
		if m.at != a {
			continue
		}
		s := m.decisions
		if kind == Denials {
			s = m.denials
		}
		if s != nil {
			sums = append(sums, s)
		}
	}
	return sums
}

// estimate sums key's bounds over sums, and adds to the error that of the
// sampling (see Entry), by the largest weight the summaries counted.
func estimate(sums []*summary, key string, h uint64) Entry {
	e := Entry{Key: key}
	w := int64(1)
	for _, s := range sums {
		lo, hi := s.bounds(key, h)
		e.Count += hi
		e.Error += hi - lo
		w = max(w, s.weight)
	}
	if w > 1 {
		e.Error += int64(math.Ceil(4 * math.Sqrt(float64((e.Count+w)*(w-1)))))
	}
	return e
}
