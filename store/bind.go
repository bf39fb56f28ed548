package store

// Binder is implemented by in-process stores (store/memory) that can take a
// limiter's rules once, when the limiter is made, and then decide on them
// without a Batch: the limiter's fast path. A bound decision is the Apply of
// a Consume, Peek or Record batch of the same rules, keys, limits and cost,
// with the same answers; only its form differs. It is passed and returned
// by value (no pointer crosses the interface, so nothing a decision builds
// escapes to the heap), and it names each rule by its place in the bound
// set, so the store has resolved everything about a rule but its key
// before the first decision.
//
// Remote stores do not implement it: their calls are batched on the wire.
// Decorators of a store (store/overlimit, store/share) do not either, so a
// limiter over them takes the Batch path to the decorator.
type Binder interface {
	// Bind returns the decisions of rules, at most MaxBound of them, in
	// this order. Bind is called once per limiter; the Bound is safe for
	// concurrent use.
	Bind(rules []BoundRule) Bound
}

// MaxBound is the most rules a Bound decides on. A limiter with more rules
// takes the Batch path.
const MaxBound = 4

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
	// One is Decide of a set of one rule, with a Call whose only key is
	// key and whose limits are limit and burst (0: the rule's), its
	// arguments and answer small enough to pass in registers: the
	// commonest decision at its cheapest. It returns Results[0],
	// Stamps[0] and Allowed.
	One(mode Mode, now, cost int64, ticket uint64, key string, limit, burst int64) (res Result, stamp int64, allowed bool)
}

// Call is one decision on bound rules: a Batch of mode Consume, Peek or
// Record whose ops are the bound rules i with a key Keys[i].
type Call struct {
	Mode Mode
	// Now is the decision's time, µs since the Unix epoch.
	Now  int64
	Cost int64
	// Ticket is the Batch's Ticket: the lease id of Concurrency rules.
	Ticket uint64
	// Keys are the rules' keys for this decision; "" skips the rule.
	Keys [MaxBound]string
	// Limits and Bursts, when not 0, replace rule i's Params.Limit and
	// Params.Burst for this decision (an override, a limit function).
	Limits, Bursts [MaxBound]int64
}

// Answer is a bound decision's answer. Results[j] and Stamps[j] are what
// Op.Result and Op.Stamp would hold for the j-th rule the call did not
// skip (the j-th Op of the Batch).
type Answer struct {
	// Allowed is the Batch's Allowed: true when a consume was admitted
	// and charged.
	Allowed bool
	Results [MaxBound]Result
	Stamps  [MaxBound]int64
}
