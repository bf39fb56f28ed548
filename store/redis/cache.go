package redis

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// denyCache remembers rule keys Redis denied, until the instant the denial
// can first lift, so a flood on a denied key is answered without a round
// trip. See the package documentation for when this is exact.
type denyCache struct {
	seed   maphash.Seed
	shards [16]denyShard
	per    int
}

type denyShard struct {
	mu sync.Mutex
	m  map[cacheKey]denial
	// gave holds the keys a cross-slot compensation of this store gave
	// units back to, with the local time (ns) it landed: a denial of such
	// a key in the answer to a request sent before then may have seen the
	// units that were given back, and is not learned.
	gave map[cacheKey]int64
	_    [32]byte
}

// gaveKeep is how long (ns) a compensation is remembered: longer than any
// request that could have seen the units it gave back is in flight.
const gaveKeep = int64(10 * time.Second)

// ClusterDenyBound is the longest a Store on a Redis Cluster with TagRule
// keeps a cached denial. A cross-slot decision charges its rules' slots
// one by one and gives back what it charged when another slot denies; a
// replica that saw a key denied in between holds a denial Redis no longer
// does, and can learn of the give-back only by asking. The bound is how
// long such a replica can deny a unit that is free.
const ClusterDenyBound = time.Second

type cacheKey struct{ scope, key string }

// denial is one cached denial. Times are local clock readings in ns.
type denial struct {
	until   int64 // the denial can lift from here on
	resetAt int64
	cost    int64 // the smallest cost known denied
	rem     int64
	params  store.Params
}

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), per: max(1, size/16)}
	for i := range c.shards {
		c.shards[i].m = make(map[cacheKey]denial)
		c.shards[i].gave = make(map[cacheKey]int64)
	}
	return c
}

func (c *denyCache) shard(k cacheKey) *denyShard {
	h := maphash.String(c.seed, k.key) ^ maphash.String(c.seed, k.scope)
	return &c.shards[h&15]
}

// cacheable reports whether a denial of op may be remembered: an enforced
// rule whose state only moves towards admitting with time. Concurrency
// leases are released at any moment, so they are never cached.
func cacheable(op *store.Op) bool {
	return !op.Shadow && op.Params.Algorithm != store.Concurrency
}

// lookup returns the cached denial of op at cost if it still holds at now
// and answers exactly what Redis would: the same parameters and the same
// cost (a fixed window denies every cost it cannot fit until the same
// instant, so any cost from the cached one up to the limit).
func (c *denyCache) lookup(op *store.Op, cost, now int64) (denial, bool) {
	k := cacheKey{op.Scope, op.Key}
	sh := c.shard(k)
	sh.mu.Lock()
	d, ok := sh.m[k]
	sh.mu.Unlock()
	if !ok || now >= d.until || d.params != op.Params {
		return denial{}, false
	}
	if cost != d.cost && (op.Params.Algorithm != store.FixedWindow || cost < d.cost || cost > op.Params.Limit) {
		return denial{}, false
	}
	return d, true
}

// maxLocal is how many rules a decision answered locally may have.
const maxLocal = 8

// deny answers the consume b locally when every one of its rules is a
// cached denial that still holds, and reports whether it did. A local
// answer is the one Redis would give, from what Redis last said of each
// rule: the retry after the latest of the denials, each rule's remaining
// units as reported, the reset and retry measured from those reports. A
// decision with any rule the cache does not know denied (an admitting
// rule, a shadow or concurrency rule, another cost) goes to Redis: another
// rule may deny it for longer. It is never used for peeks or records,
// which must report true state.
func (c *denyCache) deny(b *store.Batch, now int64) bool {
	if len(b.Ops) > maxLocal || !cacheable(&b.Ops[0]) {
		return false
	}
	var ds [maxLocal]denial
	for i := range b.Ops {
		op := &b.Ops[i]
		var ok bool
		if !cacheable(op) {
			return false
		}
		if ds[i], ok = c.lookup(op, b.Cost, now); !ok {
			return false
		}
	}
	for i := range b.Ops {
		op, d := &b.Ops[i], &ds[i]
		op.Stamp = 0
		op.Result = store.Result{
			Remaining:  d.rem,
			RetryAfter: wholeMicros(d.until - now),
			ResetAfter: wholeMicros(max(d.until, d.resetAt) - now),
		}
	}
	b.Allowed = false
	return true
}

// wholeMicros is ns as a Duration rounded up to a whole microsecond, the
// unit of every duration a decision reports: a client that waits that long
// waits at least as long as the cached denial holds.
func wholeMicros(ns int64) time.Duration {
	return time.Duration((ns+999)/1000) * time.Microsecond
}

// learn remembers the denials in b's results, measured from sent, the
// local time taken before the request was sent, so the cached denial lifts
// no later than the server's; bound > 0 caps how long (ns) a denial is
// kept (see ClusterDenyBound).
func (c *denyCache) learn(b *store.Batch, sent, bound int64) {
	for i := range b.Ops {
		op := &b.Ops[i]
		r := &op.Result
		if r.Allowed || r.Never || r.RetryAfter <= 0 || !cacheable(op) {
			continue
		}
		k := cacheKey{op.Scope, op.Key}
		d := denial{until: sent + int64(r.RetryAfter), resetAt: sent + int64(r.ResetAfter), cost: b.Cost, rem: r.Remaining, params: op.Params}
		if bound > 0 {
			d.until = min(d.until, sent+bound)
		}
		sh := c.shard(k)
		sh.mu.Lock()
		if at, ok := sh.gave[k]; ok && at >= sent {
			sh.mu.Unlock()
			continue // a compensation may have given back what Redis saw
		}
		if _, ok := sh.m[k]; !ok && len(sh.m) >= c.per {
			for ok, v := range sh.m {
				if v.until <= sent {
					delete(sh.m, ok)
				}
			}
		}
		if _, ok := sh.m[k]; ok || len(sh.m) < c.per {
			sh.m[k] = d
		}
		sh.mu.Unlock()
	}
}

// gaveBack drops the cached denials of the ops at idx, to which a
// cross-slot compensation gave units back at the local time at (ns), and
// keeps answers to requests sent before then from teaching them again.
func (c *denyCache) gaveBack(b *store.Batch, idx []int, at int64) {
	for _, i := range idx {
		k := cacheKey{b.Ops[i].Scope, b.Ops[i].Key}
		sh := c.shard(k)
		sh.mu.Lock()
		delete(sh.m, k)
		if len(sh.gave) >= c.per {
			for g, t := range sh.gave {
				if t < at-gaveKeep {
					delete(sh.gave, g)
				}
			}
		}
		if len(sh.gave) < c.per {
			sh.gave[k] = at
		}
		sh.mu.Unlock()
	}
}

// forget drops b's keys: a refund or reset through this store may admit
// them again before their cached denials would lift.
func (c *denyCache) forget(b *store.Batch) {
	for i := range b.Ops {
		k := cacheKey{b.Ops[i].Scope, b.Ops[i].Key}
		sh := c.shard(k)
		sh.mu.Lock()
		delete(sh.m, k)
		sh.mu.Unlock()
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
