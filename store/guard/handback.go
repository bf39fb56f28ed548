package guard

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/algo"
	"github.com/floodgate-go/floodgate/store"
)

// maxHandback is the most keys a Store remembers to hand back; the
// admissions on further keys are not handed back (and logged).
const maxHandback = 100_000

// handbackBatch is the most ops one handback Record carries.
const handbackBatch = 32

// handback remembers what a Store's fallback charged while the store
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
	first, last time.Time // the first and last charge counted, by the batches' clock
}

// count adds a charge of n at now, stamped by the fallback, first
// forgetting the charges of a window that has ended.
func (e *handbackEntry) count(p store.Params, n, stamp int64, now time.Time) {
	fixed := p.Algorithm == store.FixedWindow
	if e.units == 0 || fixed && stamp != e.stamp || !fixed && now.Sub(e.first) >= p.Window {
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
		_, end := algo.WindowAt(&e.params, e.stamp)
		return now.UnixMicro() < end
	}
	return now.Sub(e.last) < e.params.Window
}

// note remembers what b, a decision, charged on the fallback.
func (h *handback) note(b *store.Batch) {
	if b.Mode != store.Record && (b.Mode != store.Consume || !b.Allowed) {
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
// a flush is already running. The store has just answered.
func (s *Store) handBack() {
	if !s.handback.flushing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.handback.flushing.Store(false)
		s.flushHandback()
	}()
}

// flushHandback records every remembered charge still in its window into
// the store, a batch of equal costs at a time.
func (s *Store) flushHandback() {
	entries, dropped := s.handback.take()
	now := s.clock.Now()
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
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		err := s.inner.Apply(ctx, b)
		cancel()
		if err != nil {
			s.handback.putBack(items[i:])
			s.logger.Warn("floodgate: handing the fallback's admissions back to the store failed; trying again on its next answer",
				"store", s.name, "keys", len(items)-i, "err", err)
			return
		}
		units += b.Cost * int64(j-i)
		i = j
	}
	if len(items) > 0 || dropped > 0 {
		s.logger.Info("floodgate: the fallback's admissions handed back to the store",
			"store", s.name, "keys", len(items), "units", units, "keys_not_kept", dropped)
	}
}
