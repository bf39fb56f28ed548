// Package memory is floodgate's embedded store: rule state in this process's
// memory, sharded across locks, with expired state reclaimed in the background
// and a cap on the number of keys.
package memory

import (
	"context"
	"hash/maphash"
	"runtime"
	"sort"
	"sync"
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

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.InProcess = (*Store)(nil)
)

// entry is one key's slot, 128 bytes. The look-up reads the key and the
// scope first, then the expiry and the head of the algorithm state (Live,
// A): with the 128-byte entries of a 64-byte-aligned slice those share the
// first cache line.
type entry struct {
	key   string
	scope string
	exp   int64 // µs; the state means "absent" from then on
	next  int32 // next slot holding the same key under another scope, or -1
	ref   bool  // used since the eviction hand last passed
	pin   bool  // part of the batch being applied
	use   bool  // slot holds a key
	wrote bool  // the batch being applied wrote st
	st    algo.State
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

func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// InProcess reports true: the store never blocks on I/O.
func (s *Store) InProcess() bool { return true }

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

// maxInline is how many ops a batch may have before Apply allocates scratch.
const maxInline = 8

// Apply applies b atomically: the shards of all its keys are locked, in
// ascending order, for the whole batch.
func (s *Store) Apply(_ context.Context, b *store.Batch) error {
	if len(b.Ops) == 0 {
		return nil
	}
	now := b.Now.UnixMicro()
	if len(b.Ops) == 1 && (b.Mode == store.Consume || b.Mode == store.Peek) {
		s.applyOne(b, now)
		return nil
	}
	var shardBuf, lockBuf [maxInline]int
	var idxBuf [maxInline]int32
	var hashBuf [maxInline]uint64
	shardOf, locks, idx, hashes := shardBuf[:0], lockBuf[:0], idxBuf[:0], hashBuf[:0]
	if len(b.Ops) > maxInline {
		hashes = make([]uint64, 0, len(b.Ops))
		shardOf = make([]int, 0, len(b.Ops))
		locks = make([]int, 0, len(b.Ops))
		idx = make([]int32, 0, len(b.Ops))
	}
	for i := range b.Ops {
		h := maphash.String(s.seed, b.Ops[i].Key)
		si := s.shardOf(h)
		hashes = append(hashes, h)
		shardOf = append(shardOf, si)
		if !containsInt(locks, si) {
			locks = append(locks, si)
		}
	}
	if len(locks) > 1 {
		sort.Ints(locks)
	}
	s.lock(locks)
	var ticketShard *shard
	if b.Mode == store.Refund && !leasesOnly(b) {
		// The spent-ticket record lives with the first op's shard, which
		// is locked; so the check and the refund are one atomic step.
		ticketShard = &s.shards[shardOf[0]]
		// A full spent-ticket table refuses refunds: stricter, never looser.
		if _, spent := ticketShard.spent[b.Ticket]; spent || len(ticketShard.spent) >= 4*ticketShard.cap {
			s.unlock(locks)
			return nil
		}
	}
	// Resolve every op to a slot before taking pointers: inserting may
	// grow a shard's slice.
	for i := range b.Ops {
		op := &b.Ops[i]
		sh := &s.shards[shardOf[i]]
		if now > sh.now {
			sh.now = now
		}
		j := sh.find(hashes[i], op.Scope, op.Key)
		if j >= 0 {
			sh.entries[j].ref = true
		} else {
			// A key not held has nothing to reset or refund, and a peek
			// must not write it (inserting could evict another key).
			if b.Mode == store.Reset || b.Mode == store.Refund || b.Mode == store.Peek {
				idx = append(idx, -1)
				continue
			}
			j = sh.insert(hashes[i], op.Scope, op.Key, now) // a new key earns its second chance by reuse
		}
		sh.entries[j].pin = true
		idx = append(idx, j)
	}
	s.apply(b, now, shardOf, idx, ticketShard)
	for i, j := range idx {
		if j < 0 {
			continue
		}
		sh := &s.shards[shardOf[i]]
		e := &sh.entries[j]
		e.pin = false
		if b.Mode == store.Reset || spent(e, e.wrote, now) {
			sh.remove(j)
		}
	}
	s.unlock(locks)
	return nil
}

// applyOne is Apply for the most common batch, a consume or peek of one
// rule: the same steps as the general path without its bookkeeping for
// several shards and slots.
func (s *Store) applyOne(b *store.Batch, now int64) {
	op := &b.Ops[0]
	h := maphash.String(s.seed, op.Key)
	sh := &s.shards[s.shardOf(h)]
	sh.mu.Lock()
	if now > sh.now {
		sh.now = now
	}
	j := sh.find(h, op.Scope, op.Key)
	var fresh entry // a peek's view of a key not held: never inserted
	e := &fresh
	switch {
	case j >= 0:
		sh.entries[j].ref = true
		e = &sh.entries[j]
	case b.Mode == store.Peek:
		fresh.st.Reset()
	default:
		j = sh.insert(h, op.Scope, op.Key, now)
		e = &sh.entries[j]
	}
	p := &op.Params
	var tmp algo.State
	v := view(p, e, &tmp)
	algo.Normalize(p, v, now)
	ok, never, retry := algo.Check(p, v, now, b.Cost)
	op.Result = store.Result{Allowed: ok, Never: never, RetryAfter: micros(retry)}
	allowed := ok || op.Shadow
	charge := b.Mode == store.Consume && ok
	if charge {
		op.Stamp = algo.Take(p, v, now, b.Cost, b.Ticket)
	}
	settle(p, op, e, v, charge, now)
	b.Allowed = allowed && b.Mode == store.Consume
	if j >= 0 && spent(e, charge, now) {
		sh.remove(j)
	}
	sh.mu.Unlock()
}

// view is the state a decision on e works on: e's own for kinds that
// normalize by the clock alone, else a copy in tmp that settle keeps only
// when the decision charges. See package algo.
func view(p *store.Params, e *entry, tmp *algo.State) *algo.State {
	if algo.InPlace(p.Algorithm) {
		return &e.st
	}
	*tmp = e.st
	return tmp
}

// settle fills op's remaining and reset from v, the state decided on, and
// keeps v as e's state when the decision wrote (charged or recorded), with
// its expiry. A decision that charged nothing leaves e as it was.
func settle(p *store.Params, op *store.Op, e *entry, v *algo.State, wrote bool, now int64) {
	rem, reset, exp := algo.StatusExpiry(p, v, now)
	op.Result.Remaining, op.Result.ResetAfter = rem, micros(reset)
	if wrote || algo.InPlace(p.Algorithm) {
		e.exp = exp
		if v != &e.st {
			e.st = *v
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

// apply runs the algorithms over a batch whose keys are resolved and locked.
func (s *Store) apply(b *store.Batch, now int64, shardOf []int, idx []int32, ticketShard *shard) {
	// A peek of a key not held (idx -1) works on a fresh entry of its own.
	// The scratch is declared where it is used: zeroing it is not free.
	var fresh []entry
	if b.Mode == store.Peek {
		var freshBuf [maxInline]entry
		fresh = freshBuf[:]
		if len(b.Ops) > maxInline {
			fresh = make([]entry, len(b.Ops))
		}
		for i, j := range idx {
			if j < 0 {
				fresh[i].st.Reset()
			}
		}
	}
	entry := func(i int) *entry {
		if idx[i] < 0 {
			return &fresh[i]
		}
		return &s.shards[shardOf[i]].entries[idx[i]]
	}
	switch b.Mode {
	case store.Consume, store.Peek:
		var tmpBuf [maxInline]algo.State
		tmp := tmpBuf[:]
		if len(b.Ops) > maxInline {
			tmp = make([]algo.State, len(b.Ops))
		}
		allowed := true
		for i := range b.Ops {
			op, e := &b.Ops[i], entry(i)
			p := &op.Params
			v := view(p, e, &tmp[i])
			algo.Normalize(p, v, now)
			ok, never, retry := algo.Check(p, v, now, b.Cost)
			op.Result = store.Result{Allowed: ok, Never: never, RetryAfter: micros(retry)}
			if !ok && !op.Shadow {
				allowed = false
			}
		}
		for i := range b.Ops {
			op, e := &b.Ops[i], entry(i)
			p := &op.Params
			v := &e.st
			if !algo.InPlace(p.Algorithm) {
				v = &tmp[i]
			}
			charge := b.Mode == store.Consume && allowed && op.Result.Allowed
			if charge {
				op.Stamp = algo.Take(p, v, now, b.Cost, b.Ticket)
			}
			settle(p, op, e, v, charge, now)
			e.wrote = charge
		}
		b.Allowed = allowed && b.Mode == store.Consume
	case store.Record:
		for i := range b.Ops {
			op, e := &b.Ops[i], entry(i)
			p := &op.Params
			algo.Normalize(p, &e.st, now)
			op.Stamp = algo.Take(p, &e.st, now, b.Cost, b.Ticket)
			ok, never, retry := algo.Check(p, &e.st, now, 1)
			op.Result = store.Result{Allowed: ok, Never: never, RetryAfter: micros(retry)}
			settle(p, op, e, &e.st, true, now)
			e.wrote = true
		}
	case store.Refund:
		var keep int64
		for i := range b.Ops {
			op := &b.Ops[i]
			p := &op.Params
			keep = max(keep, algo.TicketLifetime(p))
			if idx[i] < 0 {
				continue // the key is gone: its window has passed
			}
			e := entry(i)
			if algo.InPlace(p.Algorithm) {
				algo.Normalize(p, &e.st, now)
			}
			algo.Give(p, &e.st, now, b.Cost, op.Stamp, b.Ticket)
			// The result reports the key as the refund leaves it, brought
			// to now on a copy; the stored state and its expiry stay as
			// they are (the key can only reach "nothing held" sooner).
			var tmp algo.State
			v := view(p, e, &tmp)
			algo.Normalize(p, v, now)
			settle(p, op, e, v, false, now)
			e.wrote = false
		}
		if ticketShard != nil {
			ticketShard.spent[b.Ticket] = now + keep
		}
	case store.Reset:
		for i := range b.Ops {
			b.Ops[i].Result = store.Result{Allowed: true, Remaining: b.Ops[i].Params.Limit}
		}
	}
}

// leasesOnly reports whether every op of b is a Concurrency rule: a refund
// of leases alone is idempotent and keeps no spent-ticket record (see
// store.Refund).
func leasesOnly(b *store.Batch) bool {
	for i := range b.Ops {
		if b.Ops[i].Params.Algorithm != store.Concurrency {
			return false
		}
	}
	return true
}

func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
