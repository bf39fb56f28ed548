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
// Only what is still in a window when the store answers is handed back:
// units charged longer than the rule's window ago have aged out, as they
// would have in the store. Units recorded into the store land in its
// current window (a sliding window's newest bucket, a bucket's tokens now),
// which is stricter than the store would have been, never looser.
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

type handbackEntry struct {
	params store.Params
	units  int64
	last   time.Time // the last charge, by the limiter's clock
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
		e.params, e.units, e.last = op.Params, e.units+b.Cost, b.Now
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
			e.units += it.e.units
			if it.e.last.After(e.last) {
				e.last = it.e.last
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
		if e.units > 0 && now.Sub(e.last) < windowOf(e.params) {
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
