package floodgate

import (
	"context"
	"math/rand/v2"
	"time"
)

// Observer is told of decisions (consume, peek and record; see
// Options.Observer), for metrics, top keys and audit. The Event is the
// observer's to keep.
type Observer func(ctx context.Context, e Event)

// Event describes one decision for an Observer. It is a value that refers
// to nothing of the limiter's, and building it allocates nothing for a
// decision of up to four applied rules.
type Event struct {
	Limiter string
	Mode    Mode
	Cost    int64
	// Time is when the decision was made, by the limiter's clock.
	Time     time.Time
	Decision Decision
	// Weight is how many decisions the Event stands for: ObserveSample
	// for an admitted decision drawn into the sample, else 1.
	Weight int64

	rules few[RuleEvent]
}

// RuleEvent is one applied rule's part in a decision.
type RuleEvent struct {
	Rule string
	// Key is the key the rule was applied to (see RuleDecision.Key).
	Key string
	// Denied says the rule denied the decision (a shadow rule: would have
	// denied it). It is false when Failed.
	Denied bool
	// Shadow says the rule runs dark.
	Shadow bool
	// Failed says the store did not answer: the failure policy decided.
	Failed bool
}

// Rules are the applied rules' parts in the decision, in rule order.
func (e *Event) Rules() []RuleEvent { return e.rules.all() }

// AddRule adds a rule's part to the event, after those it holds: for code
// that tells an Observer of decisions made elsewhere.
func (e *Event) AddRule(r RuleEvent) {
	p := e.rules.next()
	p.Rule, p.Key, p.Denied, p.Shadow, p.Failed = r.Rule, r.Key, r.Denied, r.Shadow, r.Failed
}

// maxObserveSample is the largest Options.ObserveSample.
const maxObserveSample = 1 << 20

// weight is how many decisions d stands for when the observer is told of
// it (see Options.ObserveSample), or 0 when it is not: d is an admitted
// decision left out of the sample.
func (l *Limiter) weight(d *Decision) int64 {
	switch {
	case l.sample <= 1 || !d.Allowed || d.ShadowDenied || d.Err != nil:
		return 1
	case rand.Uint32N(l.sample) == 0:
		return int64(l.sample)
	}
	return 0
}

// report fills o, when asked, with d, the decision read off sh at now
// (answered: the store answered), and tells the observer of it when it is
// drawn into the sample.
func (l *Limiter) report(ctx context.Context, sh *sheet, now time.Time, d Decision, answered bool, o *Outcome) {
	if o != nil {
		c := &sh.call
		*o = Outcome{Decision: d, Rules: ruleDecisions(sh, d, answered), limiter: l.name, id: c.Ticket, cost: c.Cost, until: c.Hold.Until}
		if c.Hold.Units > 0 {
			o.cost = c.Hold.Units // what the ticket's holds are
		}
	}
	if l.observer == nil {
		return
	}
	w := l.weight(&d)
	if w == 0 {
		return
	}
	e := Event{Limiter: l.name, Mode: sh.call.Mode, Cost: sh.call.Cost, Time: now, Decision: d, Weight: w}
	for i := range sh.n {
		r, key, _, _, _, _ := sh.op(i)
		e.AddRule(RuleEvent{Rule: r.Name, Key: key, Denied: answered && !sh.res(i).Allowed, Shadow: r.shadow, Failed: !answered})
	}
	l.observer(ctx, e)
}
