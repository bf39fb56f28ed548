// Package memory is floodgate's embedded store: rule state in this process's
// memory, sharded across locks, with expired state reclaimed in the background
// and a cap on the number of keys.
package memory

import (
	"context"
	"hash/maphash"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/algo"
	"github.com/floodgate-go/floodgate/store"
)

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// MaxKeys caps the number of keys held; 0 means 1,000,000. When the
	// store is full, a new key evicts a key that has not been used
	// recently (second-chance eviction), so a flood of distinct keys
	// cannot grow memory without bound and hot keys stay put.
	MaxKeys int
	// Shards is the number of independently locked shards, rounded up to a
	// power of two (and halved while it exceeds MaxKeys); 0 picks one from
	// GOMAXPROCS and MaxKeys.
	Shards int
	// SweepInterval is how often expired keys are reclaimed in the
	// background, a second after they expire (a decision may reach the
	// store that much after a later-timed one); 0 means 1s, a negative
	// value disables the sweeper (expired keys are then reclaimed only by
	// eviction).
	SweepInterval time.Duration
}

// DefaultMaxKeys is the key cap of a Store whose Options leave it 0.
const DefaultMaxKeys = 1_000_000

// Store is the in-memory implementation of store.Store. It is safe for
// concurrent use. Call Close to stop its background sweeper.
type Store struct {
	shards  []shard
	mask    uint64
	seed    maphash.Seed
	maxKeys int

	// scopes number the rules' scopes, so that an entry holds a scope in
	// 4 bytes of its first cache line. The map is copied on write (a new
	// scope is a new rule: rare) and read without a lock.
	scopes   atomic.Pointer[map[string]uint32]
	scopesMu sync.Mutex

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ store.Store = (*Store)(nil)

// entry is one key's slot, 128 bytes. A decision on a key that one rule
// keys on reads and writes the first cache line alone (with the 128-byte
// entries of a 64-byte-aligned slice): the key, the scope's number, the
// flags, the expiry and the head of the algorithm state (Live, A, B, C,
// all that windows, buckets and GCRA keep). The rest of the state and the
// link to the key's next scope share the second.
type entry struct {
	key   string
	scope uint32 // the rule's scope, numbered by the store (see scopeID); 0 in a free slot
	ref   bool   // used since the eviction hand last passed
	pin   bool   // part of the batch being applied
	use   bool   // slot holds a key
	wrote bool   // the batch being applied wrote st
	exp   int64  // µs; the state means "absent" from then on
	st    algo.State
	next  int32 // next slot holding the same key under another scope, or -1
	_     [12]byte
}

// shard is one lock's worth of keys. Entries live in a slice indexed by the
// map, so the steady state allocates nothing and the GC sees few pointers.
type shard struct {
	mu      sync.Mutex
	tab     []uint64 // the index: key → first slot of its chain (see find)
	keys    int      // keys in tab (distinct key strings)
	seed    maphash.Seed
	n       int // keys held
	entries []entry
	free    []int32
	hand    int
	cap     int
	now     int64            // latest time seen, µs (drives the sweeper)
	spent   map[uint64]int64 // refunded tickets → when they may be forgotten
	sweep   int              // sweeper cursor
	_       [40]byte         // keep neighbouring shards' locks apart
}

// New returns a Store with the given options (nil for defaults).
func New(opts *Options) *Store {
	if opts == nil {
		opts = &Options{}
	}
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	n := opts.Shards
	if n <= 0 {
		n = 16 * runtime.GOMAXPROCS(0)
		for n > 1 && maxKeys/n < 1024 {
			n /= 2
		}
	}
	n = nextPow2(n)
	for n > 1 && n > maxKeys {
		n /= 2 // every shard holds at least one key
	}
	s := &Store{
		shards:  make([]shard, n),
		mask:    uint64(n - 1),
		seed:    maphash.MakeSeed(),
		maxKeys: maxKeys,
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	// The shards' capacities add up to exactly maxKeys.
	per, extra := maxKeys/n, maxKeys%n
	for i := range s.shards {
		s.shards[i].cap = per
		if i < extra {
			s.shards[i].cap++
		}
		s.shards[i].seed = s.seed
		s.shards[i].spent = make(map[uint64]int64)
	}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = time.Second
	}
	if interval > 0 {
		go s.sweeper(interval)
	} else {
		close(s.done)
	}
	return s
}

// scopeID returns the number of scope, numbering it on first sight.
// Numbers are never reused: a store sees as many scopes as its limiters
// have had rules.
func (s *Store) scopeID(scope string) uint32 {
	if m := s.scopes.Load(); m != nil {
		if id, ok := (*m)[scope]; ok {
			return id
		}
	}
	s.scopesMu.Lock()
	defer s.scopesMu.Unlock()
	old := s.scopes.Load()
	if old != nil {
		if id, ok := (*old)[scope]; ok {
			return id
		}
	}
	m := make(map[string]uint32, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	id := uint32(len(m) + 1)
	m[scope] = id
	s.scopes.Store(&m)
	return id
}

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// Close stops the background sweeper. The store keeps answering.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	return nil
}

// Len returns the number of keys held.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// shardOf picks the shard of a key by its hash h (maphash.String with the
// store's seed) alone: the same key of different rules shares a shard, so a
// batch whose rules key on the same attribute takes one lock. The same hash
// then indexes the key within its shard (see find).
func (s *Store) shardOf(h uint64) int { return int(h & s.mask) }

// maxInline is how many ops a decision may have before the store
// allocates scratch: a Call's most.
const maxInline = store.MaxCallOps

// name is the state an op decides on: its rule's scope (by number, see
// scopeID) and its key.
type name struct {
	scope uint32
	key   string
}

// op is one rule of a decision as the store applies it, whichever way the
// decision came in (a Batch to Apply, a Call to a Bound): the rule's
// parameters and where its answer goes; then, once resolved, the hash,
// shard and slot of its key. The op's name is apart, in a slice of its
// own: a key the store inserts is kept, and escape analysis, which does
// not tell the fields of a slice's elements apart, would send the answers
// the ops point to (the caller's) to the heap with it.
type op struct {
	p      *store.Params
	shadow bool
	held   bool // a reservation's op: it holds the decision's Hold (see reserves)
	res    *store.Result
	stamp  *int64 // an output of consume and record, an input of refund and settle

	h     uint64
	shard int
	slot  int32 // -1: the key is not held (a peek, a refund or a reset of it)
}

// Apply applies b atomically: the shards of all its keys are locked, in
// ascending order, for the whole batch.
func (s *Store) Apply(_ context.Context, b *store.Batch) error {
	if len(b.Ops) == 0 {
		return nil
	}
	var nameBuf [maxInline]name
	var buf [maxInline]op
	names, ops := nameBuf[:0], buf[:0]
	if len(b.Ops) > maxInline {
		names, ops = make([]name, 0, len(b.Ops)), make([]op, 0, len(b.Ops))
	}
	for i := range b.Ops {
		o := &b.Ops[i]
		names = append(names, name{s.scopeID(o.Scope), o.Key})
		ops = append(ops, op{p: &o.Params, shadow: o.Shadow, held: reserves(b.Mode, b.Hold, o.Held, &o.Params), res: &o.Result, stamp: &o.Stamp})
	}
	b.Allowed = s.decide(b.Mode, b.Now.UnixMicro(), b.Cost, b.Ticket, b.Hold, names, ops)
	return nil
}

// reserves reports whether an op marked held (Op.Held) holds h, a
// decision's hold: in a consume with units to hold, on a rule whose keys
// keep holds.
func reserves(mode store.Mode, h store.Hold, held bool, p *store.Params) bool {
	return held && mode == store.Consume && h.Units > 0 && p.Holds && p.Algorithm == store.FixedWindow
}

// decide applies one decision of mode to ops, named by names, atomically,
// and reports whether a consume was admitted (and charged), or a settle
// applied. The held ops of a consume hold h (see store.Batch.Hold). The shards of
// all its keys are locked, in ascending order, for the whole decision;
// rules keyed on one value (the commonest decision of several rules) take
// one hash and one lock, and each rule's slot is found along the key's
// chain from the rule before it.
func (s *Store) decide(mode store.Mode, now, cost int64, ticket uint64, h store.Hold, names []name, ops []op) bool {
	var lockBuf [maxInline]int
	locks := lockBuf[:0]
	if len(ops) > maxInline {
		locks = make([]int, 0, len(ops))
	}
	for i := range ops {
		o := &ops[i]
		if i > 0 && names[i].key == names[i-1].key {
			o.h = ops[i-1].h // rules keyed on the same value: one hash
		} else {
			o.h = maphash.String(s.seed, names[i].key)
		}
		o.shard = s.shardOf(o.h)
		if !slices.Contains(locks, o.shard) {
			locks = append(locks, o.shard)
		}
	}
	slices.Sort(locks)
	s.lock(locks)
	defer s.unlock(locks)
	var ticketShard *shard
	if mode == store.Refund && !leasesOnly(ops) || mode == store.Settle && ticket != 0 {
		// The spent-ticket record lives with the first op's shard, which
		// is locked; so the check and the refund (or settlement) are one
		// atomic step.
		ticketShard = &s.shards[ops[0].shard]
		if _, spent := ticketShard.spent[ticket]; spent {
			return false // changing nothing, and answering nothing per op
		}
		if len(ticketShard.spent) >= 4*ticketShard.cap {
			// A full spent-ticket table refuses refunds, and settles
			// without a record (a second settlement finds no hold and
			// charges again): stricter, never looser.
			if mode == store.Refund {
				return false
			}
			ticketShard = nil
		}
	}
	// Resolve every op to a slot before taking pointers: inserting may
	// grow a shard's slice.
	for i := range ops {
		o := &ops[i]
		sh := &s.shards[o.shard]
		if now > sh.now {
			sh.now = now
		}
		prev := int32(-1)
		if i > 0 && names[i].key == names[i-1].key {
			prev = ops[i-1].slot
		}
		j := sh.findAfter(prev, o.h, names[i].scope, names[i].key)
		switch {
		case j >= 0:
			sh.entries[j].ref = true
		case mode == store.Reset || mode == store.Refund || mode == store.Peek:
			// A key not held has nothing to reset or refund, and a peek
			// must not write it (inserting could evict another key).
			o.slot = -1
			continue
		default:
			j = sh.insert(o.h, names[i].scope, names[i].key, now) // a new key earns its second chance by reuse
		}
		sh.entries[j].pin = true
		o.slot = j
	}
	allowed := s.apply(mode, now, cost, ticket, h, ops, ticketShard)
	for i := range ops {
		o := &ops[i]
		if o.slot < 0 {
			continue
		}
		sh := &s.shards[o.shard]
		e := &sh.entries[o.slot]
		e.pin = false
		if mode == store.Reset || spent(e, e.wrote, now) {
			sh.remove(o.slot)
		}
	}
	return allowed
}

// decideOne is decide for a consume or peek of one rule, the commonest
// decision: the same steps without the loops over rules (the memory
// store's BenchmarkOneRule).
func (s *Store) decideOne(mode store.Mode, now, cost int64, ticket uint64, n name, o *op) bool {
	h := maphash.String(s.seed, n.key)
	sh := &s.shards[s.shardOf(h)]
	sh.mu.Lock()
	if now > sh.now {
		sh.now = now
	}
	j := sh.find(h, n.scope, n.key)
	var e *entry // nil for a peek of a key not held, which is never inserted
	switch {
	case j >= 0:
		e = &sh.entries[j]
		e.ref = true
	case mode == store.Consume:
		j = sh.insert(h, n.scope, n.key, now)
		e = &sh.entries[j]
	}
	var tmp algo.State // the zero State is an absent key
	v := &tmp
	if e != nil {
		v = view(o.p, e, v)
	}
	algo.Normalize(o.p, v, now)
	ok, never, retry := algo.Check(o.p, v, now, cost)
	*o.res = store.Result{Allowed: ok, Never: never, RetryAfter: micros(retry)}
	charge := mode == store.Consume && ok
	if charge {
		*o.stamp = algo.Take(o.p, v, now, cost, ticket)
	}
	settle(o.p, o.res, e, v, charge, now)
	if e != nil && spent(e, charge, now) {
		sh.remove(j)
	}
	sh.mu.Unlock()
	return (ok || o.shadow) && mode == store.Consume
}

// view is the state a decision on e works on: e's own for kinds that
// normalize by the clock alone, else a copy in tmp that settle keeps only
// when the decision charges. See package algo.
func view(p *store.Params, e *entry, tmp *algo.State) *algo.State {
	if algo.InPlace(p.Algorithm) {
		return &e.st
	}
	// The kinds normalized on a copy keep all their state in its head
	// (see algo.State): copying Ring and Leases too would cost a
	// decision more than its arithmetic. A fixed window with holds
	// shares its holds with the copy, which settle always stores back:
	// they lapse by the clock alone, and a decision that holds writes
	// them.
	tmp.Live, tmp.A, tmp.B, tmp.C = e.st.Live, e.st.A, e.st.B, e.st.C
	if p.Holds {
		tmp.Leases = e.st.Leases
	}
	return tmp
}

// settle fills res's remaining and reset from v, the state decided on, and
// keeps v as e's state when the decision wrote (charged, held or
// recorded), with its expiry; the holds of a copy are kept whatever the
// decision (see view). A decision that wrote nothing leaves e's head as it
// was; e is nil for a peek of a key not held.
func settle(p *store.Params, res *store.Result, e *entry, v *algo.State, wrote bool, now int64) {
	rem, reset, exp := algo.StatusExpiry(p, v, now)
	res.Remaining, res.ResetAfter = rem, micros(reset)
	if e == nil {
		return
	}
	if p.Holds && v != &e.st {
		e.st.Leases = v.Leases
	}
	if wrote || algo.InPlace(p.Algorithm) {
		e.exp = exp
		if v != &e.st { // a copy of the head (see view)
			e.st.Live, e.st.A, e.st.B, e.st.C = v.Live, v.A, v.B, v.C
		}
	}
}

// spent reports whether e may be forgotten after a decision at now: its
// state means nothing held, and the decision wrote it (or found no state).
// An expired key that a decision read but did not write stays for the
// sweeper: decisions carry their limiter's clock and may arrive out of
// order, and one timed earlier may still count in the window this one saw
// end; and a token bucket is full only at the burst of its last write.
func spent(e *entry, wrote bool, now int64) bool {
	return e.exp <= now && (wrote || !e.st.Live)
}

func (s *Store) lock(locks []int) {
	for _, si := range locks {
		s.shards[si].mu.Lock()
	}
}

func (s *Store) unlock(locks []int) {
	for _, si := range locks {
		s.shards[si].mu.Unlock()
	}
}

// apply runs the algorithms over a decision whose keys are resolved and
// locked, and reports whether a consume was admitted (a settle: applied).
// The held ops of a consume check and hold h.Units in place of cost.
func (s *Store) apply(mode store.Mode, now, cost int64, ticket uint64, h store.Hold, ops []op, ticketShard *shard) bool {
	// A peek of a key not held (slot -1) works on a fresh entry of its own.
	// The scratch is declared where it is used: zeroing it is not free.
	var fresh []entry
	if mode == store.Peek {
		var freshBuf [maxInline]entry
		fresh = freshBuf[:]
		if len(ops) > maxInline {
			fresh = make([]entry, len(ops))
		}
		for i := range ops {
			if ops[i].slot < 0 {
				fresh[i].st.Reset()
			}
		}
	}
	switch mode {
	case store.Consume, store.Peek:
		var tmpBuf [maxInline]algo.State
		tmp := tmpBuf[:]
		if len(ops) > maxInline {
			tmp = make([]algo.State, len(ops))
		}
		allowed := true
		for i := range ops {
			o, e := &ops[i], s.entryOf(ops, i, fresh)
			v := view(o.p, e, &tmp[i])
			algo.Normalize(o.p, v, now)
			n := cost
			if o.held {
				n = h.Units
			}
			ok, never, retry := algo.Check(o.p, v, now, n)
			*o.res = store.Result{Allowed: ok, Never: never, RetryAfter: micros(retry)}
			if !ok && !o.shadow {
				allowed = false
			}
		}
		for i := range ops {
			o, e := &ops[i], s.entryOf(ops, i, fresh)
			v := &e.st
			if !algo.InPlace(o.p.Algorithm) {
				v = &tmp[i]
			}
			charge := mode == store.Consume && allowed && o.res.Allowed
			switch {
			case charge && o.held:
				*o.stamp = algo.Hold(o.p, v, now, h.Units, h.Until, ticket)
			case charge:
				*o.stamp = algo.Take(o.p, v, now, cost, ticket)
			}
			settle(o.p, o.res, e, v, charge, now)
			e.wrote = charge
		}
		return allowed && mode == store.Consume
	case store.Record:
		for i := range ops {
			o, e := &ops[i], s.entryOf(ops, i, fresh)
			algo.Normalize(o.p, &e.st, now)
			*o.stamp = algo.Take(o.p, &e.st, now, cost, ticket)
			ok, never, retry := algo.Check(o.p, &e.st, now, 1)
			*o.res = store.Result{Allowed: ok, Never: never, RetryAfter: micros(retry)}
			settle(o.p, o.res, e, &e.st, true, now)
			e.wrote = true
		}
	case store.Refund:
		var keep int64
		for i := range ops {
			o := &ops[i]
			keep = max(keep, algo.TicketLifetime(o.p))
			if o.slot < 0 {
				continue // the key is gone: its window has passed
			}
			e := s.entryOf(ops, i, fresh)
			if algo.InPlace(o.p.Algorithm) {
				algo.Normalize(o.p, &e.st, now)
			}
			algo.Give(o.p, &e.st, now, cost, *o.stamp, ticket)
			// The result reports the key as the refund leaves it, brought
			// to now on a copy; the stored state and its expiry stay as
			// they are (the key can only reach "nothing held" sooner).
			var tmp algo.State
			v := view(o.p, e, &tmp)
			algo.Normalize(o.p, v, now)
			settle(o.p, o.res, e, v, false, now)
			e.wrote = false
		}
		if ticketShard != nil {
			ticketShard.spent[ticket] = now + keep
		}
	case store.Settle:
		var keep int64
		for i := range ops {
			o, e := &ops[i], s.entryOf(ops, i, fresh)
			keep = max(keep, algo.TicketLifetime(o.p))
			var tmp algo.State
			v := view(o.p, e, &tmp)
			algo.Normalize(o.p, v, now)
			found, charged := algo.Settle(o.p, v, now, cost, *o.stamp, ticket)
			// A record's result (a peek at 1 after), but for Allowed:
			// whether the hold was still there.
			ok, never, retry := algo.Check(o.p, v, now, 1)
			*o.res = store.Result{Allowed: found, Never: never}
			if !ok && !never {
				o.res.RetryAfter = micros(retry)
			}
			settle(o.p, o.res, e, v, charged, now)
			e.wrote = charged
		}
		if ticketShard != nil {
			ticketShard.spent[ticket] = now + keep
		}
		return true
	case store.Reset:
		for i := range ops {
			*ops[i].res = store.Result{Allowed: true, Remaining: ops[i].p.Limit}
		}
	}
	return false
}

// entryOf is the entry of ops[i], a resolved op: its slot's, or fresh[i]
// for a peek of a key not held.
func (s *Store) entryOf(ops []op, i int, fresh []entry) *entry {
	if ops[i].slot < 0 {
		return &fresh[i]
	}
	return &s.shards[ops[i].shard].entries[ops[i].slot]
}

// leasesOnly reports whether every op is of a Concurrency rule: a refund
// of leases alone is idempotent and keeps no spent-ticket record (see
// store.Refund).
func leasesOnly(ops []op) bool {
	for i := range ops {
		if ops[i].p.Algorithm != store.Concurrency {
			return false
		}
	}
	return true
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
