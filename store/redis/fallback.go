package redis

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
)

// fallback answers from per-instance memory limits while Redis is down.
type fallback struct {
	mem       *memory.Store
	n         int64
	retry     int64 // ns
	downUntil atomic.Int64
	probing   atomic.Bool
}

func newFallback(o *Fallback) *fallback {
	f := &fallback{n: int64(o.Instances), retry: int64(o.Retry)}
	if f.retry <= 0 {
		f.retry = int64(time.Second)
	}
	keys := o.MaxKeys
	if keys <= 0 {
		keys = 100_000
	}
	f.mem = memory.New(&memory.Options{MaxKeys: keys})
	return f
}

func (f *fallback) close() { f.mem.Close() }

// active reports whether a decision at now (ns) should use memory. Once the
// retry interval has passed, one caller at a time is let through to probe
// Redis: probe is then true, and the caller must call endProbe when done.
func (f *fallback) active(now int64) (use, probe bool) {
	u := f.downUntil.Load()
	if u == 0 {
		return false, false
	}
	if now < u {
		return true, false
	}
	if f.probing.CompareAndSwap(false, true) {
		return false, true
	}
	return true, false
}

func (f *fallback) endProbe() { f.probing.Store(false) }

// down records a failure at now and reports whether the fallback just
// turned on.
func (f *fallback) down(now int64) bool {
	was := f.downUntil.Swap(now + f.retry)
	f.probing.Store(false)
	return was == 0
}

// up records a success and reports whether the fallback just turned off.
func (f *fallback) up() bool {
	if f.downUntil.Load() == 0 {
		return false
	}
	f.probing.Store(false)
	return f.downUntil.Swap(0) != 0
}

// apply runs b on the memory store with every limit divided by the
// instance count.
func (f *fallback) apply(b *store.Batch) error {
	fb := store.Batch{Mode: b.Mode, Now: b.Now, Cost: b.Cost, Ticket: b.Ticket, Ops: make([]store.Op, len(b.Ops))}
	copy(fb.Ops, b.Ops)
	for i := range fb.Ops {
		p := &fb.Ops[i].Params
		p.Limit = max(1, p.Limit/f.n)
		if p.Burst > 0 {
			p.Burst = max(1, p.Burst/f.n)
		}
	}
	if err := f.mem.Apply(context.Background(), &fb); err != nil {
		return err
	}
	b.Allowed = fb.Allowed
	for i := range b.Ops {
		b.Ops[i].Result, b.Ops[i].Stamp = fb.Ops[i].Result, fb.Ops[i].Stamp
	}
	return nil
}
