// Package store is the port between floodgate's limiters and the stores
// that hold rule state: the Store interface, the Batch a limiter hands it,
// and the algorithm parameters a store evaluates (Params, Algorithm, Align);
// and Binder, by which an in-process store decides a limiter's rules without
// a Batch (Bound, Call, Answer). Store implementations (store/memory, store/redis) depend on this package
// alone; users of floodgate do not need it.
package store

import (
	"context"
	"time"
)

// Store holds rule state and applies whole decisions to it atomically.
//
// A store receives every applicable rule of a decision in one Batch and must
// apply it as one atomic step: for Consume, either every enforced rule
// (Shadow false) admits and every admitting rule is charged, or nothing is
// charged at all. Both stores of this module pass the conformance suite in
// package floodgate/storetest, which is the executable form of this contract.
//
// Apply returns an error only when the store could not answer (unreachable,
// timed out, context done); a denial is a result in the batch. It must return
// promptly once ctx is done. Implementations must be safe for concurrent use.
type Store interface {
	Apply(ctx context.Context, b *Batch) error
}

// Mode says what a Batch does.
type Mode uint8

const (
	// Consume checks every rule at the batch cost and charges them all
	// when every enforced rule admits.
	Consume Mode = iota
	// Peek checks every rule at the batch cost and charges nothing.
	Peek
	// Record charges every rule without checking (post-flight usage);
	// the results then describe a peek at cost 1.
	Record
	// Refund gives back the units of ticket Batch.Ticket, once: each
	// Op carries the rule and the stamp it was charged at. Releasing a
	// Concurrency lease (by the ticket's id) is idempotent, so a refund
	// whose ops are all Concurrency neither checks nor records the ticket
	// as spent: releasing a decision's leases (a decision's lease ticket)
	// leaves the rest of its ticket refundable.
	Refund
	// Reset forgets the state of every Op's key.
	Reset
	// Settle ends reservations (see Batch.Hold). Each op is a rule that
	// held units, with the Stamp of the window its hold was taken in.
	//
	// With a Ticket, Settle ends that reservation, once: a ticket already
	// settled changes nothing, and Allowed is false. Otherwise, on each
	// op's key, the hold of that id is removed and Cost, the units used,
	// is charged in its place; a hold no longer there (it lapsed) charges
	// Cost all the same; either charge lands only while the window named
	// by Stamp is the key's current one. Result.Allowed says whether the
	// op's hold was still there; Allowed is true. The store remembers the
	// ticket settled for as long as a refund's (algo.TicketLifetime).
	//
	// Without a Ticket (0), Settle ends the oldest hold of each op's key
	// (the first to lapse), whatever its id, charging Cost in its place, or
	// charges Cost alone when the key holds none (Result.Allowed: a hold
	// was found): for callers that cannot carry the ticket, such as
	// Envoy's charge when an answer's stream is done.
	//
	// Results report each key as a record's do: a peek at 1 afterwards.
	Settle
)

var modeNames = [...]string{"consume", "peek", "record", "refund", "reset", "settle"}

// String returns the mode's name, such as "consume".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "mode?"
}

// Batch is one decision as a store sees it.
type Batch struct {
	Mode Mode
	// Now is the engine's clock reading. Stores with a clock of their own
	// (store/redis uses the server's) may use that instead.
	Now time.Time
	// Cost is the units asked for (>= 1 for consume and peek, >= 0 for record).
	Cost int64
	// Ticket identifies the decision: for Consume and Record it is
	// the lease id for Concurrency rules (0 when the decision needs no
	// ticket: no Concurrency rule, nobody asked for one); for Refund it is
	// the ticket being refunded, which a store must refund at most once.
	Ticket uint64
	// Ops are the applicable rules, in the limiter's rule order.
	Ops []Op
	// Hold, when its Units are not 0, makes a Consume a reservation: each
	// op marked Held checks Units instead of Cost and, when the batch is
	// admitted, holds them as reservation Ticket until Until (or its
	// window's end, if sooner), instead of being charged. Held units count
	// against the rule as charged ones do until a Settle ends the hold or
	// it lapses, when the store gives them back by itself. The other ops
	// are checked and charged Cost, all or nothing with the holds. A held
	// op's Stamp is the window the hold was taken in.
	Hold Hold

	// Allowed is set by Consume: true when every enforced rule admitted
	// and the batch was charged.
	Allowed bool
}

// Op is one rule of a Batch.
type Op struct {
	// Scope names the rule's state ("limiter/rule@window" from a
	// floodgate.Limiter: a rule whose window changes gets a new state);
	// Key is the escaped key within it. Together they name the state.
	Scope string
	Key   string
	// Params are the rule's parameters for this decision (after per-request
	// limit look-ups).
	Params Params
	// Shadow ops are evaluated but never deny the batch.
	Shadow bool
	// Held marks the op of a rule that holds Batch.Hold (see there).
	Held bool
	// Grant is the rule's floodgate.Rule.Grant: a grant decorator
	// (store/grant) answers the op's consumes from quota grants. Stores
	// ignore it.
	Grant bool
	// Stamp is an output of Consume (the window or bucket the units were
	// counted in) and an input of Refund.
	Stamp int64

	// Result is the rule's answer.
	Result Result
}

// Params are a rule's algorithm parameters, as a store needs them.
type Params struct {
	Algorithm Algorithm
	Limit     int64
	Window    time.Duration
	Burst     int64 // TokenBucket and GCRA capacity
	Buckets   int64 // SlidingWindow sub-buckets
	Align     Align
	Location  *time.Location // AlignDay and AlignMonth
	// Holds says the rule's keys may hold reservations (FixedWindow
	// only): every decision on them counts the live holds (see
	// Batch.Hold).
	Holds bool
}

// Result is one rule's answer to one batch.
type Result struct {
	// Allowed reports whether the rule admits the batch cost (consume and
	// peek), or a cost of 1 after the batch (record).
	Allowed bool
	// Never reports that the cost exceeds what the rule can ever admit.
	Never bool
	// Remaining is the units left after the batch.
	Remaining int64
	// ResetAfter is the time until the rule's full quota is available again.
	ResetAfter time.Duration
	// RetryAfter, when Allowed is false and Never is false, is the exact
	// time after which the same cost would be admitted, assuming no other
	// traffic.
	RetryAfter time.Duration
}

// Hold is what a reservation holds on each of its rules: Units, until
// Until (µs since the Unix epoch).
type Hold struct {
	Units int64
	Until int64
}
