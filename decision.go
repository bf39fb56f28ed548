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
	// ReasonInvalid: the request could not be decided as asked, and is
	// denied; Err says why (a *KeyError for a request without a rule's
	// key under Options.RequireKeys, ErrNotOneKey for AllowKey on a
	// limiter whose rules key on several attributes). It is a programming
	// or set-up error, not a store's failure: the failure policy does not
	// decide it, and nothing is charged.
	ReasonInvalid
)

// String returns "", "limit", "store" or "invalid".
func (r Reason) String() string {
	switch r {
	case ReasonLimit:
		return "limit"
	case ReasonStore:
		return "store"
	case ReasonInvalid:
		return "invalid"
	}
	return ""
}

// Decision is the answer to one request. It is a plain value: keep it,
// copy it, compare it.
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
	// Never reports that the cost exceeds what a rule can ever admit:
	// retrying cannot help.
	Never bool
	// ShadowDenied reports that a shadow rule (or a shadow limiter's rule)
	// would have denied this request.
	ShadowDenied bool
	// Rule names the binding rule ("" when no rule applied).
	Rule       string
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	// Err is the store error behind a ReasonStore decision, or what made
	// a ReasonInvalid one invalid.
	Err error
}

// Outcome is a decision with what each rule decided and, for an admitted
// consume, what refunding it takes (Ticket). Limiter.Decide returns it; the
// shorter Allow, AllowN, Peek and Record return the Decision alone and do
// not build it.
type Outcome struct {
	Decision
	// Rules are the applied rules' results in rule order. Rules skipped for
	// lack of a key are absent.
	Rules []RuleDecision

	limiter string
	id      uint64
	cost    int64
	until   int64 // a reservation's: when its holds lapse (µs); 0 for any other decision
}

// RuleDecision is what one rule decided.
type RuleDecision struct {
	Name string
	// Key is the key the rule was applied to: the value of its one key
	// attribute as given, or its key attributes' values escaped and joined
	// with ':', or "*" for a rule without key attributes (see MaxKeyLen for
	// long keys). Keys are personal data; never put them in metric labels.
	Key string
	// Allowed is what the rule itself decided; for a shadow rule it may be
	// false while the decision is admitted.
	Allowed    bool
	Shadow     bool
	Never      bool
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration
	// Capacity is the most units one request can be admitted at once under
	// the limits this rule applied: the burst of a token bucket or GCRA rule
	// (after overrides and limit functions), the limit otherwise. Remaining
	// is never above it.
	Capacity int64

	algorithm Algorithm
	stamp     int64
	took      bool // units were charged to this rule
	held      bool // a reservation's units were held on this rule
}

// Ticket returns what a refund of this outcome needs, or for an admitted
// reservation (Limiter.Reserve) what settling it needs: its held rules,
// and when the holds lapse. It is valid only for an admitted consume that
// charged something (see Ticket.Valid).
func (o Outcome) Ticket() Ticket {
	if o.until != 0 {
		t := o.ticket(func(r RuleDecision) bool { return r.held })
		if t.Valid() {
			t.Until = time.UnixMicro(o.until)
		}
		return t
	}
	return o.ticket(func(RuleDecision) bool { return true })
}

// LeaseTicket returns the part of the outcome's ticket that holds
// Concurrency leases: refunding it releases the leases and gives back
// nothing else. It is the zero Ticket when the decision took no lease.
// Middleware refunds it when a request ends.
func (o Outcome) LeaseTicket() Ticket {
	return o.ticket(func(r RuleDecision) bool { return r.algorithm == Concurrency })
}

// ticket is the ticket of the charged rules that keep says to keep: the
// zero Ticket when there are none or the outcome was not admitted.
func (o Outcome) ticket(keep func(RuleDecision) bool) Ticket {
	if !o.Allowed {
		return Ticket{}
	}
	t := Ticket{Limiter: o.limiter, ID: o.id, Cost: o.cost}
	for _, r := range o.Rules {
		if r.took && keep(r) {
			t.Entries = append(t.Entries, r.entry())
		}
	}
	if len(t.Entries) == 0 {
		return Ticket{}
	}
	return t
}

// entry is the ticket entry of a rule that was charged.
func (r RuleDecision) entry() TicketEntry {
	e := TicketEntry{Rule: r.Name, Key: r.Key, Stamp: r.stamp, Limit: r.Limit}
	if r.algorithm == TokenBucket || r.algorithm == GCRA {
		e.Burst = r.Capacity
	}
	return e
}
