package floodgate

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// maxHandback is the most keys a limiter remembers to hand back; the
// admissions on further keys are not handed back (and logged).
const maxHandback = 100_000

// handbackBatch is the most ops one handback Record carries.
const handbackBatch = 32

// handback remembers what a limiter's fallback charged while the store
// could not answer, and records it into the store once the store answers
// again: the store then counts, in its current windows, the units the
// instance admitted on its own, and a window is not spent twice (once
// locally during the outage, once more in the store when it is back).
//
// Only what the fallback charged in its current window is handed back (a
// fixed window's, or the last window's span for the other algorithms):
// units of windows that have ended have aged out, as they would have in
// the store. Units recorded into the store land in its current window (a
// sliding window's newest bucket, a bucket's tokens now), which is
// stricter than the store would have been, never looser.
// Concurrency leases are not handed back: they are released by their
// tickets. It is safe for concurrent use.
type handback struct {
	pending  atomic.Bool // entries holds something: the store's success path checks it
	flushing atomic.Bool // a flush is running
	mu       sync.Mutex  // guards entries and dropped
	entries  map[handbackKey]*handbackEntry
	dropped  int64
}

type handbackKey struct{ scope, key string }

// handbackEntry is what the fallback charged one rule key in its current
// window: a fixed window's (the one that opened at stamp), or for the
// other algorithms the charges since first, restarted once first is a
// window old.
type handbackEntry struct {
	params      store.Params
	units       int64
	stamp       int64     // FixedWindow: the fallback's window start (µs)
	first, last time.Time // the first and last charge counted, by the limiter's clock
}

// count adds a charge of n at now, stamped by the fallback, first
// forgetting the charges of a window that has ended.
func (e *handbackEntry) count(p store.Params, n, stamp int64, now time.Time) {
	fixed := p.Algorithm == store.FixedWindow
	if e.units == 0 || fixed && stamp != e.stamp || !fixed && now.Sub(e.first) >= windowOf(p) {
		e.units, e.stamp, e.first = 0, stamp, now
	}
	e.params, e.units, e.last = p, e.units+n, now
}

// current says whether the charges still count at now: the fallback's
// fixed window is still open, or the last charge is less than a window old.
func (e *handbackEntry) current(now time.Time) bool {
	if e.units <= 0 {
		return false
	}
	if e.params.Algorithm == store.FixedWindow {
		return now.UnixMicro() < e.stamp+windowOf(e.params).Microseconds()
	}
	return now.Sub(e.last) < windowOf(e.params)
}

// note remembers what b charged on the fallback. A nil handback (a
// limiter without one) remembers nothing.
func (h *handback) note(b *store.Batch) {
	if h == nil {
		return
	}
	charged := b.Mode == store.Record || b.Mode == store.Consume && b.Allowed
	if !charged && b.Mode != store.Refund {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.entries == nil {
		h.entries = map[handbackKey]*handbackEntry{}
	}
	for i := range b.Ops {
		op := &b.Ops[i]
		if op.Params.Algorithm == store.Concurrency {
			continue
		}
		k := handbackKey{op.Scope, op.Key}
		e := h.entries[k]
		if b.Mode == store.Refund {
			if e != nil {
				e.units = max(0, e.units-b.Cost)
			}
			continue
		}
		if op.Shadow && !op.Result.Allowed {
			continue // a shadow rule that would deny is not charged
		}
		if e == nil {
			if len(h.entries) >= maxHandback {
				h.dropped++
				continue
			}
			e = &handbackEntry{}
			h.entries[k] = e
		}
		e.count(op.Params, b.Cost, op.Stamp, b.Now)
	}
	h.pending.Store(len(h.entries) > 0)
}

// take empties the handback and returns what it held, and how many keys it
// could not hold.
func (h *handback) take() (map[handbackKey]*handbackEntry, int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	entries, dropped := h.entries, h.dropped
	h.entries, h.dropped = nil, 0
	h.pending.Store(false)
	return entries, dropped
}

// putBack returns entries a flush could not record, to be tried again.
func (h *handback) putBack(entries []handbackItem) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.entries == nil {
		h.entries = map[handbackKey]*handbackEntry{}
	}
	for _, it := range entries {
		if e := h.entries[it.k]; e != nil {
			// Charged again since the flush took it: add up, unless a new
			// fixed window has opened since, in which the old one's units
			// have aged out.
			if it.e.params.Algorithm != store.FixedWindow || e.stamp == it.e.stamp {
				e.units += it.e.units
			}
			continue
		}
		h.entries[it.k] = it.e
	}
	h.pending.Store(len(h.entries) > 0)
}

type handbackItem struct {
	k handbackKey
	e *handbackEntry
}

// handBack starts recording the fallback's charges into the store, unless
// a flush is already running. The store has just answered l.
func (l *Limiter) handBack() {
	if !l.handback.flushing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.handback.flushing.Store(false)
		l.flushHandback()
	}()
}

// flushHandback records every remembered charge still in its window into
// the store, a batch of equal costs at a time.
func (l *Limiter) flushHandback() {
	entries, dropped := l.handback.take()
	now := l.clock.Now()
	items := make([]handbackItem, 0, len(entries))
	for k, e := range entries {
		if e.current(now) {
			items = append(items, handbackItem{k, e})
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].e.units < items[j].e.units })
	var units int64
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && j-i < handbackBatch && items[j].e.units == items[i].e.units {
			j++
		}
		b := &store.Batch{Mode: store.Record, Now: now, Cost: items[i].e.units}
		for _, it := range items[i:j] {
			b.Ops = append(b.Ops, store.Op{Scope: it.k.scope, Key: it.k.key, Params: it.e.params})
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
		err := l.store.Apply(ctx, b)
		cancel()
		if err != nil {
			l.handback.putBack(items[i:])
			l.logger.Warn("floodgate: handing the fallback's admissions back to the store failed; trying again on its next answer",
				"limiter", l.name, "keys", len(items)-i, "err", err)
			return
		}
		units += b.Cost * int64(j-i)
		i = j
	}
	if len(items) > 0 || dropped > 0 {
		l.logger.Info("floodgate: the fallback's admissions handed back to the store",
			"limiter", l.name, "keys", len(items), "units", units, "keys_not_kept", dropped)
	}
}

// windowOf is how long a charge under p can still count: the rule's
// window, or a calendar window's longest (a month).
func windowOf(p store.Params) time.Duration {
	switch p.Align {
	case store.AlignDay:
		return 25 * time.Hour // a day with a daylight-saving hour
	case store.AlignMonth:
		return 31 * 24 * time.Hour
	}
	return p.Window
}
