package store

// Binder is the one optional interface of a store: an in-process store
// (store/memory) that takes a limiter's rules once, when the limiter is
// made, and then decides on them by value, without a Batch. A bound
// decision is the Apply of the Batch of the same rules, keys, limits,
// stamps and cost, with the same answers; only its form differs. It is
// passed and returned by value, so that nothing a decision builds escapes
// to the heap through the interface, and it names each rule by its place
// in the bound set, so the store has resolved everything about a rule but
// its key before the first decision.
//
// Remote stores do not implement it: their calls are batched on the wire.
// Decorators of a store (store/overlimit, store/share, store/grant,
// store/guard) do not either, so a limiter over them sends Batches.
type Binder interface {
	// Bind returns the decisions of rules, in this order. Bind is called
	// once per limiter; the Bound is safe for concurrent use.
	Bind(rules []BoundRule) Bound
}

// MaxCallOps is the most rules one Call decides on. A limiter sends a
// decision of more rules as a Batch.
const MaxCallOps = 4

// BoundRule is one rule of a Binder's set: what an Op of the rule always
// holds.
type BoundRule struct {
	Scope  string
	Params Params
	Shadow bool
}

// Bound decides on the rules it was bound to. It never fails: an in-process
// store always answers.
type Bound interface {
	// Decide decides c.
	Decide(c Call) Answer
	// One is Decide of a consume, peek or record on a set of one rule,
	// whose key is key and whose limits are limit and burst (0: the
	// rule's), its arguments and answer small enough to pass in
	// registers: the commonest decision at its cheapest. It returns
	// Results[0], Stamps[0] and Allowed.
	One(mode Mode, now, cost int64, ticket uint64, key string, limit, burst int64) (res Result, stamp int64, allowed bool)
}

// Call is one decision on bound rules: a Batch of N ops, op i being bound
// rule Rules[i] with key Keys[i].
type Call struct {
	Mode Mode
	// Now is the decision's time, µs since the Unix epoch.
	Now  int64
	Cost int64
	// Ticket is the Batch's Ticket: the lease id of Concurrency rules,
	// the ticket a Refund gives back.
	Ticket uint64
	// N is the number of ops, at most MaxCallOps.
	N int
	// Rules are the ops' rules, by their place in the bound set.
	Rules [MaxCallOps]int
	Keys  [MaxCallOps]string
	// Limits and Bursts, when not 0, replace op i's Params.Limit and
	// Params.Burst for this decision (an override, a limit function, or
	// the limits a refunded ticket was charged under).
	Limits, Bursts [MaxCallOps]int64
	// Stamps are the ops' Op.Stamp: an input of Refund and Settle.
	Stamps [MaxCallOps]int64
	// Held and Hold are the Batch's Op.Held and Hold: a reservation.
	Held [MaxCallOps]bool
	Hold Hold
}

// Answer is a bound decision's answer: Results[i] and Stamps[i] are what
// op i's Op.Result and Op.Stamp would hold after Apply.
type Answer struct {
	// Allowed is the Batch's Allowed: true when a consume was admitted
	// and charged.
	Allowed bool
	Results [MaxCallOps]Result
	Stamps  [MaxCallOps]int64
}
