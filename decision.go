package floodgate

import "time"

// Reason says why a decision came out as it did.
type Reason uint8

const (
	// ReasonNone: the decision was made by the rules and admitted.
	ReasonNone Reason = iota
	// ReasonLimit: a rule denied the decision.
	ReasonLimit
	// ReasonStore: the store failed and the failure policy decided.
	ReasonStore
)

// String returns "", "limit" or "store".
func (r Reason) String() string {
	switch r {
	case ReasonLimit:
		return "limit"
	case ReasonStore:
		return "store"
	}
	return ""
}

// inlineRules is how many per-rule results a Decision holds without
// allocating.
const inlineRules = 4

// Decision is the answer to one request.
//
// Limit, Remaining and ResetAfter describe the binding rule: when denied,
// the denying rule with the longest wait; when admitted, the rule with the
// fewest units left. RetryAfter is set when denied: the exact time until this
// same request would be admitted (the maximum over the denying rules), or 0
// when Never is set. A fail-closed store decision carries the circuit
// breaker's remaining cooldown, at least one second.
type Decision struct {
	Allowed bool
	Reason  Reason
	// Rule names the binding rule ("" when no rule applied).
	Rule       string
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	// Never reports that the cost exceeds what a rule can ever admit:
	// retrying cannot help.
	Never bool
	// ShadowDenied reports that a shadow rule (or a shadow limiter's rule)
	// would have denied this request.
	ShadowDenied bool
	// Err is the store error behind a ReasonStore decision.
	Err error

	limiter *Limiter
	cost    int64
	id      uint64
	n       int
	rules   [inlineRules]RuleDecision
	more    []RuleDecision
}

// RuleDecision is what one rule decided.
type RuleDecision struct {
	Name string
	// Allowed is what the rule itself decided; for a shadow rule it may be
	// false while the decision is admitted.
	Allowed    bool
	Shadow     bool
	Never      bool
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration

	key   string
	stamp int64
	took  bool // units were charged to this rule
	rule  int  // index in the limiter's rules

	burst int64 // the capacity charged under (TokenBucket, GCRA)
}

// Key returns the key the rule was applied to: the rule's key attribute
// values, escaped and joined with ':', or "*" for a rule without key
// attributes. Keys are personal data; never put them in metric labels.
func (r RuleDecision) Key() string { return r.key }

// Rules returns the applied rules' results in rule order. Rules skipped for
// lack of a key are absent. The slice aliases d.
func (d *Decision) Rules() []RuleDecision {
	if d.more != nil {
		return d.more
	}
	return d.rules[:d.n]
}

func (d *Decision) ruleSlot() *RuleDecision {
	if d.n < inlineRules {
		d.n++
		return &d.rules[d.n-1]
	}
	if d.more == nil {
		d.more = make([]RuleDecision, inlineRules, 2*inlineRules)
		copy(d.more, d.rules[:])
	}
	d.more = append(d.more, RuleDecision{})
	d.n++
	return &d.more[len(d.more)-1]
}

// Ticket returns what a refund of this decision needs. It is valid only for
// an admitted decision that charged something (see Ticket.Valid).
func (d Decision) Ticket() Ticket {
	if !d.Allowed || d.limiter == nil {
		return Ticket{}
	}
	t := Ticket{Limiter: d.limiter.name, ID: d.id, Cost: d.cost}
	for _, r := range d.Rules() {
		if r.took {
			t.Entries = append(t.Entries, TicketEntry{Rule: r.Name, Key: r.key, Stamp: r.stamp, Limit: r.Limit, Burst: r.burst})
		}
	}
	return t
}

// LeaseTicket returns the part of the decision's ticket that holds
// Concurrency leases: refunding it releases the leases and gives back
// nothing else. It is the zero Ticket, without allocating, when the
// decision took no lease. Middleware refunds it when a request ends.
func (d Decision) LeaseTicket() Ticket {
	if !d.Allowed || d.limiter == nil {
		return Ticket{}
	}
	held := false
	for _, r := range d.Rules() {
		held = held || r.took && d.limiter.rules[r.rule].Algorithm == Concurrency
	}
	if !held {
		return Ticket{}
	}
	t := d.Ticket()
	kept := t.Entries[:0]
	for _, e := range t.Entries {
		if c := d.limiter.byName[e.Rule]; c != nil && c.Algorithm == Concurrency {
			kept = append(kept, e)
		}
	}
	t.Entries = kept
	return t
}

// Capacity is the most units one request can be admitted at once under the
// limits this rule applied: the burst of a token bucket or GCRA rule
// (after overrides and limit functions), the limit otherwise. Remaining is
// never above it.
func (r RuleDecision) Capacity() int64 {
	if r.burst > 0 {
		return r.burst
	}
	return r.Limit
}
