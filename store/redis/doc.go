// Package redis is floodgate's shared store: rule state in Redis 7 (single
// node, Sentinel or Cluster), so that every instance of a service enforces
// the same limits. It decides on Redis and nothing else: the deadline, the
// circuit breaker and a local fallback are a decorator the caller composes
// around it (store/guard), as the over-limit cache is (store/overlimit):
//
//	rs, _ := redis.New(&redis.Options{URL: "redis://127.0.0.1:6379"})
//	guarded, _ := guard.New(overlimit.New(rs, nil), nil)
//	lim, _ := floodgate.New("api", guarded, rules, nil)
//
// # One script call per decision
//
// The scripts (scripts/*.lua, embedded) are a port of package
// internal/algo that reproduces its integer microsecond arithmetic exactly,
// one file per algorithm or family: lib.lua (arithmetic, clock, per-call
// state cache), fixed.lua (first-hit windows), aligned.lua (clock- and
// calendar-aligned windows, and their consume in straight lines),
// holds.lua (the holds of reservations a reservable fixed window keeps),
// bucket.lua (token bucket and GCRA), sliding.lua, concurrency.lua,
// args.lua (reading the arguments) and apply.lua (the batches of a call). They are one Redis Functions library whose name
// carries its version, loaded once per node; a whole decision — every
// rule's key and rule, the cost and the mode — is one FCALL, and
// all-or-nothing across rules holds atomically on the server. A node that
// does not hold the library (restarted, failed over, new) answers that the
// function is not found; the store loads the library and sends the call
// again. Functions need Redis 7.0 or later, or Valkey: New fails on an
// older server, naming its version.
//
// Arguments and state are decimal text a person can read in MONITOR and
// redis-cli: an op's rule travels as "gcra limit=100 window=60000000
// burst=20", a first-hit fixed window's state is a hash (the count n and
// the window's end e), an aligned window's a counter in a key named for
// its window, a token bucket's "tokens=4 frac=0 ts=...", a GCRA key's "tat=... frac=0
// limit=..."; sliding windows and leases are hashes. docs/redis.md shows
// each in redis-cli.
//
// # Coalescing
//
// On a single node or Sentinel master, concurrent decisions share script
// calls. A decision is sent at once, alone, when fewer than two calls are
// in flight, so an idle store adds no delay; while two are, decisions
// queue, and when a call returns the queue (up to Options.MaxCoalesce
// decisions) goes out as the next call. The script applies each decision
// in it atomically and independently, exactly as alone: all or nothing per
// decision, not across decisions, and one decision's error is its own. A
// caller whose deadline passes while its decision waits or is in a call
// gets its error at once; a decision already sent may still be applied,
// which leaves the limiter stricter, never looser. The server's TIME is
// read once per call, fixed windows, token buckets and GCRA keys are read
// with one MGET per call, and each changed key is written once, at the end
// of the call, so a hot key shared by the call's decisions costs one read
// and one write. Cluster decisions are not coalesced.
//
// Time is the server's TIME, so instances with skewed clocks agree.
// Options.UseBatchTime uses the limiter's clock instead (for tests with a
// fake clock).
//
// # Keys
//
// A rule key's state lives under prefix + "{scope:key}:" + the algorithm
// (fixed, sliding, bucket, gcra or leases; leases add a sorted set of
// expiries, a reservable fixed window ("...}:holds") a sorted set of the
// reservations' holds, "ticket:units:n" scored by when each lapses, refunded
// and settled tickets a marker). The scope is the limiter's:
// "limiter/rule@window" (the window, such as "1m", keeps a rule whose
// window changes from reading the old window's state; see docs/redis.md). The braces are a Cluster
// hash tag: all of one rule key's data shares a slot. With Options.HashTag
// set to TagLimiter, the tag is the limiter's name instead: prefix +
// "{limiter}/rule@window:key:" + the algorithm, so all of one limiter's data
// shares a slot. Every key is written with a TTL in the same script step,
// from the instant its state means the same as an absent key; a key that
// means "absent" is deleted instead.
//
// # Cluster
//
// In Cluster, the rules of one decision usually hash to different slots.
// The store then runs the script once per slot, in parallel (one pipelined
// round trip): each slot checks its rules and charges them only if they
// all admit. When one slot denies, the store refunds (compensates) the
// slots that charged, and ends the holds a reservation took there, in a
// second round trip. So:
//
//   - no rule ever admits more than its limit: each slot's check-and-charge
//     is atomic;
//   - a denied decision's units stay charged on the other slots for at most
//     one more round trip, during which a concurrent decision may be denied
//     that would have been admitted: the skew is towards strictness;
//   - if the compensation itself fails (a node went away), those units stay
//     charged until their window passes: stricter, never looser.
//
// Decisions whose keys share a slot (single-rule limiters, or any limiter
// with TagLimiter) are one atomic call, as on a single node. TagLimiter puts
// all of a limiter's keys, and its traffic, on one node: use it for
// limiters with few keys (gateway routes and candidates, a global quota),
// not for per-user limiters with millions of keys; the option covers every
// limiter of a store, so such limiters can use a second store.
//
// # Moving slots
//
// While a slot migrates between masters (redis-cli --cluster reshard or
// rebalance, CLUSTER SETSLOT by hand) and while a node loads its data set,
// Redis refuses some calls before running them: TRYAGAIN (a call of several
// keys that are not all on one of the slot's two nodes), LOADING, and the
// ASK and MOVED redirects rueidis follows itself. Such a call did not run,
// so the store sends it again after a short wait (1 ms, doubling to 16 ms)
// while its deadline leaves time, and the node's breaker takes no verdict
// from it. A call of several keys refused with TRYAGAIN is taken apart, one
// call per op, since keys a call would create exist on neither node for as
// long as the slot migrates: a consume is then checked and charged per op
// and compensated as across slots (the bound above holds), a refund or a
// settlement of a ticket first records its ticket spent (a refund of no
// ops, a call of one key) and gives back or settles per op, and an op of
// two keys (a concurrency rule's, a reservable window's) has the one that
// exists on neither node made first, alone, meaning no key. See
// docs/redis.md.
//
// # Sentinel
//
// In a Sentinel failover the sentinels announce the new master about a
// second after promoting it; until then the old master, when it is up,
// takes writes it then discards. The store listens to every sentinel and,
// when one starts promoting a replica of its master, pauses the old
// master's writes (CLIENT PAUSE ... WRITE) until the switch, so those
// decisions follow the failure policy instead of losing their charges.
// Sentinel.NoFailoverPause turns this off.
//
// # Failure
//
// A Store is a remote store: the limiter gives each call its deadline and
// its circuit breaker and applies its failure policy; within the deadline,
// a script call that failed is sent again when that cannot loosen a limit
// (see docs/redis.md). In Cluster, failure isolation follows the topology:
// each master has a circuit breaker in the store (Options.NodeBreaker), and
// a failure is returned as a *store.ConfinedError, which the limiter's own
// breaker does not count. A lost master costs only the decisions on its
// keys, which follow the failure policy until it or its promoted replica
// answers again. New warns when a master has no replica or a node has
// cluster-require-full-coverage yes, which makes every node refuse every
// key once a master is marked failed.
package redis
