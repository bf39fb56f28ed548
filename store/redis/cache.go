package redis

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
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
	_  [40]byte
}

type cacheKey struct{ scope, key string }

// denial is one cached denial. Times are local clock readings in ns.
type denial struct {
	until   int64 // the denial can lift from here on
	resetAt int64
	cost    int64 // the smallest cost known denied
	rem     int64
	params  floodgate.Params
}

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), per: max(1, size/16)}
	for i := range c.shards {
		c.shards[i].m = make(map[cacheKey]denial)
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
func cacheable(op *floodgate.Op) bool {
	return !op.Shadow && op.Params.Algorithm != floodgate.Concurrency
}

// lookup returns the cached denial of op at cost if it still holds at now
// and answers exactly what Redis would: the same parameters and the same
// cost (a fixed window denies every cost it cannot fit until the same
// instant, so any cost from the cached one up to the limit).
func (c *denyCache) lookup(op *floodgate.Op, cost, now int64) (denial, bool) {
	k := cacheKey{op.Scope, op.Key}
	sh := c.shard(k)
	sh.mu.Lock()
	d, ok := sh.m[k]
	sh.mu.Unlock()
	if !ok || now >= d.until || d.params != op.Params {
		return denial{}, false
	}
	if cost != d.cost && (op.Params.Algorithm != floodgate.FixedWindow || cost < d.cost || cost > op.Params.Limit) {
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
func (c *denyCache) deny(b *floodgate.Batch, now int64) bool {
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
		op.Result = floodgate.Result{
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

// learn remembers the denials in b's results, measured from now, the local
// time taken before the request was sent, so the cached denial lifts no
// later than the server's.
func (c *denyCache) learn(b *floodgate.Batch, now int64) {
	for i := range b.Ops {
		op := &b.Ops[i]
		r := &op.Result
		if r.Allowed || r.Never || r.RetryAfter <= 0 || !cacheable(op) {
			continue
		}
		k := cacheKey{op.Scope, op.Key}
		d := denial{until: now + int64(r.RetryAfter), resetAt: now + int64(r.ResetAfter), cost: b.Cost, rem: r.Remaining, params: op.Params}
		sh := c.shard(k)
		sh.mu.Lock()
		if _, ok := sh.m[k]; !ok && len(sh.m) >= c.per {
			for ok, v := range sh.m {
				if v.until <= now {
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

// forget drops b's keys: a refund or reset through this store may admit
// them again before their cached denials would lift.
func (c *denyCache) forget(b *floodgate.Batch) {
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
// floodgate.ModeRefund).
func leasesOnly(b *floodgate.Batch) bool {
	for i := range b.Ops {
		if b.Ops[i].Params.Algorithm != floodgate.Concurrency {
			return false
		}
	}
	return true
}
