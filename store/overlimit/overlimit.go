// Package overlimit is a store.Store decorator that answers floods of denied
// decisions locally, without asking the store it wraps.
//
// A denial of an enforced rule (not shadow, not concurrency) at cost n
// comes with the exact time T until n would be admitted, assuming no other
// traffic; more traffic only moves T later. Until T the Store remembers the
// denial of that rule key, with the rule's parameters (a changed limit
// bypasses it). A consume is answered locally only when every one of its
// rules is such a denial at its cost, and then exactly as the inner store
// would answer it: each rule denied with the remaining units it reported
// and its retry and reset counted down from the report, in whole
// microseconds, so the decision's retry is the latest of the denials. A
// decision with any other rule goes to the inner store, since that rule may
// deny it for longer. Peeks and records always go to the inner store.
//
// A denial is remembered only while its figures stay exact: a fixed
// window's (its remaining units do not change until the window rolls, and it
// then also stands for every cost from its remaining units up to the limit),
// or one that leaves cost-1 units (a token bucket, GCRA or sliding window
// whose remaining units cannot grow without admitting the cost).
//
// The Store never admits what the inner store would deny: it only ever
// denies, and a denial it holds lifts no later than the inner store's. What
// can make it stricter is what it cannot see: a refund or reset through
// another instance, or a Redis Cluster decision whose keys span slots and
// whose charges on one slot are given back when another slot denies (a
// replica that saw the key denied meanwhile holds a denial Redis no longer
// does). Options.MaxAge bounds how long that lasts. Refunds, resets,
// records and store answers through this Store drop or replace its
// denials of their keys.
package overlimit

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// DefaultSize is the number of denied rule keys a Store remembers when
// Options.Size is 0 or less.
const DefaultSize = 65536

// DefaultMaxAge is how long a Store remembers a denial at most when
// Options.MaxAge is 0. A second bounds how long an instance can deny a key
// that another instance's refund or reset, or a Redis Cluster compensation,
// freed; and it costs at most one inner call per denied key per second,
// however large the flood on it.
const DefaultMaxAge = time.Second

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// Size caps the number of denied rule keys remembered; 0 or less means
	// DefaultSize. When full, a new denial evicts an arbitrary one.
	Size int
	// MaxAge caps how long a denial is remembered, counted from the
	// decision whose answer taught it; 0 means DefaultMaxAge, a negative
	// value removes the cap (a denial is then remembered until it lifts,
	// which is exact only while every refund and reset of its keys passes
	// through this Store).
	MaxAge time.Duration
}

// Store is a store.Store that answers locally the consumes whose every rule
// it has seen denied, and passes everything else to the store it wraps. It
// reads the time of each decision from Batch.Now, so the limiters using it
// must have the clock the inner store counts with (the wall clock, or for
// a Redis store with UseBatchTime, the limiters' own). It is safe for
// concurrent use. Closing the inner store is the caller's business.
type Store struct {
	inner  store.Store
	maxAge int64 // µs; < 0: no cap
	per    int   // denials per shard
	seed   maphash.Seed
	shards []shard
}

var _ store.Store = (*Store)(nil)

// shard is one lock's worth of denials.
type shard struct {
	mu sync.Mutex
	m  map[ruleKey]denial
	// n is len(m), read without the lock so that decisions on an empty
	// shard, the common case, take no lock.
	n atomic.Int32
	_ [40]byte // keep neighbouring shards' locks apart
}

type ruleKey struct{ scope, key string }

// denial is one remembered denial. Times are Batch.Now readings in µs.
type denial struct {
	figures
	expires int64 // forgotten from here on: lift, or earlier by MaxAge
	cost    int64
	params  store.Params
}

// figures are what a denial answers.
type figures struct {
	lift  int64 // the cost is admitted from here on
	reset int64 // the full quota is back from here on
	rem   int64
}

// New returns a Store that answers repeated denials of inner's locally
// (nil options for the defaults).
func New(inner store.Store, opts *Options) *Store {
	if opts == nil {
		opts = &Options{}
	}
	size := opts.Size
	if size <= 0 {
		size = DefaultSize
	}
	maxAge := opts.MaxAge
	if maxAge == 0 {
		maxAge = DefaultMaxAge
	}
	n := 64
	for n > size {
		n /= 2 // every shard holds at least one denial, all hold at most size
	}
	s := &Store{inner: inner, maxAge: maxAge.Microseconds(), per: size / n, seed: maphash.MakeSeed(), shards: make([]shard, n)}
	if maxAge < 0 {
		s.maxAge = -1
	}
	for i := range s.shards {
		s.shards[i].m = make(map[ruleKey]denial)
	}
	return s
}

// Unwrap returns the store s decorates, so that what it offers beyond
// store.Store (a Redis store's Ping) can be found.
func (s *Store) Unwrap() store.Store { return s.inner }

// Apply answers b locally when it is a consume whose every rule is a
// remembered denial, and otherwise applies it to the inner store and learns
// from the answer.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	if s.inner == nil {
		return errors.New("overlimit: no inner store")
	}
	now := b.Now.UnixMicro()
	switch b.Mode {
	case store.Consume:
		if s.deny(b, now) {
			return nil
		}
	case store.Refund, store.Reset, store.Record:
		// Drop the keys' denials before, so that no decision is answered
		// from them meanwhile, and after, in case a decision in flight
		// taught them again.
		s.forget(b)
		defer s.forget(b)
	}
	if err := s.inner.Apply(ctx, b); err != nil {
		return err
	}
	if b.Mode == store.Consume || b.Mode == store.Peek {
		s.learn(b, now)
	}
	return nil
}

// maxLocal is how many rules a decision answered locally may have.
const maxLocal = 8

// deny answers the consume b from remembered denials when every one of its
// rules has one that holds at now for its cost, and reports whether it did.
func (s *Store) deny(b *store.Batch, now int64) bool {
	if len(b.Ops) == 0 || len(b.Ops) > maxLocal {
		return false
	}
	var fs [maxLocal]figures
	for i := range b.Ops {
		var ok bool
		if fs[i], ok = s.lookup(&b.Ops[i], b.Cost, now); !ok {
			return false
		}
	}
	for i := range b.Ops {
		d := &fs[i]
		b.Ops[i].Stamp = 0
		b.Ops[i].Result = store.Result{
			Remaining:  d.rem,
			RetryAfter: micros(d.lift - now),
			ResetAfter: micros(d.reset - now),
		}
	}
	b.Allowed = false
	return true
}

// lookup returns the denial of op at cost remembered for now, if any.
func (s *Store) lookup(op *store.Op, cost, now int64) (figures, bool) {
	if !cacheable(op) {
		return figures{}, false
	}
	sh := s.shard(op)
	if sh.n.Load() == 0 {
		return figures{}, false
	}
	sh.mu.Lock()
	d, ok := sh.m[ruleKey{op.Scope, op.Key}]
	sh.mu.Unlock()
	if !ok || now >= d.expires || d.params != op.Params {
		return figures{}, false
	}
	// A fixed window denies every cost it cannot fit until it rolls.
	fits := cost == d.cost || op.Params.Algorithm == store.FixedWindow && cost > d.rem && cost <= op.Params.Limit
	return d.figures, fits
}

// learn remembers the denials in the inner store's answer to b, asked at
// now, whose figures stay put until they lift, and drops the remembered
// denials of b's other keys: their state has moved.
func (s *Store) learn(b *store.Batch, now int64) {
	for i := range b.Ops {
		op := &b.Ops[i]
		if !cacheable(op) {
			continue
		}
		r := &op.Result
		// A fixed window's figures hold until it rolls; other rules' hold
		// when cost-1 units are left: one more would admit the cost.
		exact := op.Params.Algorithm == store.FixedWindow || r.Remaining == b.Cost-1
		if r.Allowed || r.Never || r.RetryAfter <= 0 || !exact {
			s.drop(op)
			continue
		}
		d := denial{cost: b.Cost, params: op.Params, figures: figures{
			lift:  now + r.RetryAfter.Microseconds(),
			reset: now + r.ResetAfter.Microseconds(),
			rem:   r.Remaining,
		}}
		d.expires = d.lift
		if s.maxAge >= 0 {
			d.expires = min(d.lift, now+s.maxAge)
		}
		k, sh := ruleKey{op.Scope, op.Key}, s.shard(op)
		sh.mu.Lock()
		if _, ok := sh.m[k]; !ok && len(sh.m) >= s.per {
			for old := range sh.m {
				delete(sh.m, old) // map order makes this an arbitrary one
				break
			}
		}
		sh.m[k] = d
		sh.n.Store(int32(len(sh.m)))
		sh.mu.Unlock()
	}
}

// forget drops the denials of b's keys.
func (s *Store) forget(b *store.Batch) {
	for i := range b.Ops {
		if op := &b.Ops[i]; cacheable(op) && !(b.Mode == store.Record && s.full(op)) {
			s.drop(op)
		}
	}
}

// full reports whether op's key has a remembered denial of a fixed window
// with nothing left under op's parameters: a record adds to the window's
// count, and the denial holds as it was (nothing left until the window
// ends), so that a refused hit recorded after its denial (Envoy's) keeps
// the key answered locally.
func (s *Store) full(op *store.Op) bool {
	if op.Params.Algorithm != store.FixedWindow {
		return false
	}
	sh := s.shard(op)
	if sh.n.Load() == 0 {
		return false
	}
	sh.mu.Lock()
	d, ok := sh.m[ruleKey{op.Scope, op.Key}]
	sh.mu.Unlock()
	return ok && d.rem == 0 && d.params == op.Params
}

// drop drops the denial of op's key.
func (s *Store) drop(op *store.Op) {
	sh := s.shard(op)
	if sh.n.Load() == 0 {
		return
	}
	sh.mu.Lock()
	delete(sh.m, ruleKey{op.Scope, op.Key})
	sh.n.Store(int32(len(sh.m)))
	sh.mu.Unlock()
}

// cacheable reports whether op's denials may be remembered: an enforced
// rule whose state only moves towards admitting with time. Concurrency
// leases are released at any moment, and so are the holds of a reservable
// rule's keys, whose denials lift as their holds lapse, so they are never
// remembered.
func cacheable(op *store.Op) bool {
	return !op.Shadow && op.Params.Algorithm != store.Concurrency && !op.Params.Holds
}

// shard returns the shard that holds op's denials: by its key alone,
// which is what varies between the keys of a rule.
func (s *Store) shard(op *store.Op) *shard {
	return &s.shards[maphash.String(s.seed, op.Key)&uint64(len(s.shards)-1)]
}

// micros is a µs count as a Duration.
func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
