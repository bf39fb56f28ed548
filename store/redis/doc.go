// Package redis is floodgate's shared store: rule state in Redis 7 (single
// node, Sentinel or Cluster), so that every instance of a service enforces
// the same limits.
//
// # One script call per decision
//
// Every algorithm is implemented by one Lua script (scripts/apply.lua,
// embedded), a port of package internal/algo that reproduces its integer
// microsecond arithmetic exactly. A whole decision — every rule's key,
// parameters, the cost and the mode — is one EVALSHA call, so all-or-nothing
// across rules holds atomically on the server. The script is sent by SHA-1;
// a server that does not hold it (restarted, failed over, new) answers
// NOSCRIPT and the call is repeated with EVAL, which loads it.
//
// # Coalescing
//
// On a single node or Sentinel master (with the default rueidis client),
// concurrent decisions share script calls. A decision is sent at once,
// alone, when fewer than two calls are in flight, so an idle store adds no
// delay; while two are, decisions queue, and when a call returns the queue
// (up to Options.MaxCoalesce decisions) goes out as the next call. The
// script applies each decision in it atomically and independently, exactly
// as alone: all or nothing per decision, not across decisions, and one
// decision's error is its own. Each decision still costs at most one script
// call (fewer on average) and one round trip. A caller whose deadline passes
// while its decision waits or is in a call gets its error at once; a
// decision already sent may still be applied, which leaves the limiter
// stricter, never looser. The server's TIME is read once per call, and the
// state of fixed windows, token buckets and GCRA is read with one MGET per
// call and each changed key written once, at the end of the call, so a hot
// key shared by the call's decisions costs one read and one write. Cluster
// decisions are not coalesced.
//
// Time is the server's TIME, so instances with skewed clocks agree.
// Options.UseBatchTime uses the limiter's clock instead (for tests with a
// fake clock).
//
// # Keys
//
// A rule key's state lives under prefix + "{limiter/rule:key}:" + a letter
// naming the algorithm (concurrency adds a lease set, refunded tickets a
// marker). The braces are a Cluster hash tag: all of one rule key's data
// shares a slot. With Options.HashTag set to TagLimiter, the tag is the
// limiter's name instead: prefix + "{limiter}/rule:key:" + the letter, so
// all of one limiter's data shares a slot. Every key is written with a TTL in the same script step,
// from the instant its state means the same as an absent key; a key that
// means "absent" is deleted instead. A fixed window that is full writes
// nothing on refused hits.
//
// # Cluster
//
// In Cluster, the rules of one decision usually hash to different slots. The
// store then runs the script once per slot, in parallel (one pipelined
// round trip): each slot checks its rules and charges them only if they all
// admit. When one slot denies, the store refunds (compensates) the slots that
// charged, in a second round trip. So:
//
//   - no rule ever admits more than its limit: each slot's check-and-charge
//     is atomic;
//   - a denied decision's units stay charged on the other slots for at most
//     one more round trip, during which a concurrent decision may be denied
//     that would have been admitted: the skew is towards strictness, bounded
//     by one round trip, and by ClusterDenyBound where another replica's
//     over-limit cache learned such a denial (the store that gave the units
//     back drops its own);
//   - if the compensation itself fails (a node went away), those units stay
//     charged until their window passes: stricter, never looser.
//
// Decisions whose keys share a slot (single-rule limiters, or any limiter
// with TagLimiter) are one atomic call, as on a single node.
//
// TagLimiter makes every decision of a limiter one atomic call in Cluster,
// at the cost of putting all of that limiter's keys, and its traffic, on one
// node. Use it for limiters with few keys (gateway routes and candidates, a
// global quota), not for per-user limiters with millions of keys, which
// should spread over the Cluster: the option covers every limiter of a
// store, so such limiters can use a second store with the default TagRule.
//
// # Over-limit cache
//
// A denial of an enforced rule (not shadow, not concurrency) at cost n comes
// with the exact time T until n would be admitted assuming no other
// traffic. More traffic only moves T later, so until T the store remembers
// the denial, keyed by rule key and parameters (a changed limit bypasses
// it). A consume at cost n is answered locally, without a round trip, only
// when every one of its rules is such a denial (a fixed window's for any
// cost from n up to its limit): the answer is then the one Redis would
// give, the retry the latest of the denials, each rule's remaining units as
// Redis reported them, retry and reset counted down from the reports in
// whole microseconds. A decision with any rule not known denied goes to
// Redis, since that rule may deny it for longer. Two things move T
// earlier: a refund or reset (this store drops its entries for the keys it
// refunds or resets, and for the keys a cross-slot compensation gives
// back; other instances' refunds are not seen, so this instance stays
// stricter until T, never looser), and clock drift (T is measured from the
// local time the request was sent, so it lifts no later than the server's).
// Only consumes are answered from the cache; peeks and records always go
// to Redis, so they report every rule's true state (peeks still teach the
// cache their denials).
// Options.DenyCacheSize bounds the cache or turns it off.
//
// # Failure
//
// A Store is a remote store: the limiter gives each call its deadline and
// its circuit breaker and applies its failure policy. With
// Options.Fallback, an unreachable Redis is answered instead from a memory
// store whose limits are divided by the expected number of instances; the
// store probes Redis again after Fallback.Retry. Limiters then see no
// errors, so their breakers stay closed while the fallback answers.
//
// In Cluster, failure isolation follows the topology: each master has a
// circuit breaker in the store (Options.NodeBreaker), and a failure is
// returned as a *store.ConfinedError, which the limiter's own breaker
// does not count. A lost master costs only the decisions on its keys, which
// follow the failure policy (or, with a fallback, are answered from memory)
// until it or its promoted replica answers again. New warns when a master
// has no replica or a node has cluster-require-full-coverage yes, which
// makes every node refuse every key once a master is marked failed.
package redis
