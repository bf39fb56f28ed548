package gateway

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Candidate is one option a Selector may choose, such as an upstream route
// of an API gateway. Its Limiter holds the candidate's caps (a
// requests-per-minute rule and a tokens-per-minute rule, say); choosing the
// candidate is one AllowN decision on it, so every cap is checked and the
// request is counted in one atomic step (one store batch: one script call
// on Redis).
type Candidate struct {
	// Name identifies the candidate in results; it need not be unique.
	Name string
	// Limiter holds the candidate's caps. A nil Limiter has no caps and is
	// always admitted.
	Limiter *floodgate.Limiter
	// Attrs are the request attributes the candidate's rules key on.
	Attrs floodgate.Attributes
	// Cost is the units asked of every rule of Limiter; 0 means 1.
	Cost int64
}

// Attempt is one candidate a Selector considered.
type Attempt struct {
	// Index is the candidate's position in the Selector's list.
	Index int
	// Name is the candidate's name.
	Name string
	// Decision is the candidate limiter's decision. When it is admitted the
	// attempt was counted and handed to the caller; when it is denied the
	// candidate was skipped and none of its counters moved.
	Decision floodgate.Decision
	// Rules are what each of the candidate's rules decided (see
	// floodgate.Outcome).
	Rules []floodgate.RuleDecision
	// Caps names the candidate's rules that refused it (empty when it was
	// admitted, or refused by a store failure under FailClosed).
	Caps []string
	// Err is what the caller reported with Selector.Failed for an admitted
	// attempt.
	Err error

	ticket floodgate.Ticket
}

// Admitted reports whether the attempt was admitted (and so counted).
func (a *Attempt) Admitted() bool { return a.Decision.Allowed }

// Ticket returns what recording the usage (RecordUsage) or refunding the attempt's
// admission needs: the zero Ticket when it was not admitted or charged
// nothing.
func (a *Attempt) Ticket() floodgate.Ticket { return a.ticket }

// decide decides on candidate c, the i-th, counting it when it is admitted.
// It is the one place the Selector asks a limiter for a decision and reads
// the decision's per-rule results.
func decide(ctx context.Context, i int, c *Candidate) Attempt {
	a := Attempt{Index: i, Name: c.Name}
	if c.Limiter == nil {
		a.Decision.Allowed = true
		return a
	}
	cost := c.Cost
	if cost == 0 {
		cost = 1
	}
	o, err := c.Limiter.Decide(ctx, floodgate.ModeConsume, c.Attrs, cost)
	if err != nil {
		// Only a negative cost fails Decide: a misuse, reported as a
		// refusal that can never be retried.
		a.Decision = floodgate.Decision{Reason: floodgate.ReasonLimit, Never: true, Err: err}
		return a
	}
	a.Decision, a.Rules, a.ticket = o.Decision, o.Rules, o.Ticket()
	if !o.Allowed {
		for _, r := range o.Rules {
			if !r.Allowed && !r.Shadow {
				a.Caps = append(a.Caps, r.Name)
			}
		}
	}
	return a
}

// Selector chooses among ordered candidates: each call to Next admits the
// next candidate whose caps all have room, skipping (and not charging) the
// capped ones. A caller whose attempt then fails upstream reports it with
// Failed and calls Next again to fail over; the failed attempt stays
// counted, because it was sent.
//
// A Selector serves one request and is not safe for concurrent use. Its
// zero value has no candidates.
type Selector struct {
	candidates []Candidate
	next       int
	attempts   []Attempt
	current    int // 1 + index in attempts of the admitted one Next returned; 0 for none
}

// NewSelector returns a Selector over candidates, tried in order. The slice
// is not copied and must not change while the Selector is in use.
func NewSelector(candidates []Candidate) *Selector {
	return &Selector{candidates: candidates}
}

// Next decides on the candidates after the last one it returned, in order,
// and returns the first that is admitted, counted against its caps. The
// Attempt is valid until the next call to Next. It returns false when no
// candidate is left; Result then says why (the earliest retry-after among
// the capped ones). A store failure is decided by each candidate limiter's
// failure policy: FailOpen admits, FailClosed skips the candidate.
func (s *Selector) Next(ctx context.Context) (*Attempt, bool) {
	s.current = 0
	for s.next < len(s.candidates) {
		i := s.next
		s.next++
		a := decide(ctx, i, &s.candidates[i])
		s.attempts = append(s.attempts, a)
		if a.Decision.Allowed {
			s.current = len(s.attempts)
			return &s.attempts[s.current-1], true
		}
	}
	return nil, false
}

// Failed reports that the attempt Next last returned failed upstream, with
// err. The attempt stays counted against its candidate's caps. Call Next to
// move on to the next candidate.
func (s *Selector) Failed(err error) {
	if s.current > 0 {
		s.attempts[s.current-1].Err = err
	}
}

// Attempts returns every candidate considered so far, in order: the skipped
// ones and the admitted ones. The slice aliases the Selector's.
func (s *Selector) Attempts() []Attempt { return s.attempts }

// Result summarises the selection so far.
func (s *Selector) Result() Selection {
	sel := Selection{Index: -1, Attempts: s.attempts, admitted: s.current}
	if s.current > 0 {
		a := &s.attempts[s.current-1]
		sel.Allowed, sel.Index, sel.Name, sel.Decision = true, a.Index, a.Name, a.Decision
	}
	never := true
	for i := range s.attempts {
		a := &s.attempts[i]
		if a.Decision.Allowed {
			sel.Sent++
			if a.Err != nil {
				sel.Failed++
			}
			continue
		}
		sel.Capped++
		if a.Decision.Never {
			continue
		}
		if never || a.Decision.RetryAfter < sel.RetryAfter {
			sel.RetryAfter = a.Decision.RetryAfter
		}
		never = false
	}
	if sel.Allowed {
		sel.RetryAfter = 0 // nothing to wait for
	} else {
		sel.Never = sel.Capped > 0 && never
	}
	return sel
}

// Selection is the outcome of choosing among candidates.
type Selection struct {
	// Allowed reports that a candidate was admitted and not (yet) reported
	// failed: Index, Name and Decision describe it.
	Allowed  bool
	Index    int // -1 when none
	Name     string
	Decision floodgate.Decision
	// Sent counts the admitted attempts (each counted against its
	// candidate's caps); Failed counts those reported failed.
	Sent, Failed int
	// Capped counts the candidates skipped because a cap (or a fail-closed
	// store) refused them.
	Capped int
	// RetryAfter, when no candidate is admitted, is the earliest
	// retry-after among the capped candidates: the time until the first of
	// them would admit this request again, absent other traffic. It is 0
	// when a candidate is admitted, when none was capped (every candidate
	// failed upstream) and when Never is set. Each capped candidate's own
	// wait is in its Attempt's Decision.
	RetryAfter time.Duration
	// Never reports that every capped candidate refused a cost larger than
	// it can ever admit.
	Never bool
	// Attempts lists every candidate considered, in order.
	Attempts []Attempt

	admitted int // 1 + index in Attempts of the admitted one; 0 for none
}

// Ticket returns the admitted candidate's ticket (see Attempt.Ticket), or
// the zero Ticket when none is admitted.
func (s Selection) Ticket() floodgate.Ticket {
	if s.admitted == 0 {
		return floodgate.Ticket{}
	}
	return s.Attempts[s.admitted-1].Ticket()
}

// Select admits the first candidate whose caps all have room: shorthand for
// NewSelector(candidates).Next(ctx) and Result, for callers that do not
// fail over.
func Select(ctx context.Context, candidates []Candidate) Selection {
	s := NewSelector(candidates)
	s.Next(ctx)
	return s.Result()
}
