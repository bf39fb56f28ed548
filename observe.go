package floodgate

import (
	"context"
	"math/rand/v2"
	"time"
)

// Observer is called once per decision with what was decided, for metrics
// and audit. The Event is the observer's to keep.
type Observer func(ctx context.Context, e Event)

// Event describes one decision for an Observer. Its Outcome's tickets
// refund nothing unless the decision was made by Decide (or on a limiter
// with Concurrency rules): only then is the decision given a ticket id.
type Event struct {
	Limiter string
	Mode    Mode
	Cost    int64
	// Time is when the decision was made, by the limiter's clock.
	Time    time.Time
	Outcome Outcome
	// Weight is how many decisions the Event stands for: ObserveSample
	// for an admitted decision drawn into the sample, else 1.
	Weight int64
}

// RuleObserver is called once for each rule that took part in a decision
// (see Options.RuleObserver).
type RuleObserver func(ctx context.Context, e RuleEvent)

// RuleEvent is one rule's part in one decision. It holds no slice, so
// telling a RuleObserver of it allocates nothing.
type RuleEvent struct {
	Limiter string
	Rule    string
	// Key is the key the rule was applied to (see RuleDecision.Key).
	Key  string
	Mode Mode
	// Time is when the decision was made, by the limiter's clock.
	Time time.Time
	// Denied says the rule denied the decision (a shadow rule: would have
	// denied it). It is false when Failed.
	Denied bool
	// Failed says the store did not answer: the failure policy decided.
	Failed bool
	// Weight is how many decisions the event stands for (see
	// Event.Weight).
	Weight int64
}

// maxObserveSample is the largest Options.ObserveSample.
const maxObserveSample = 1 << 20

// weight is how many decisions d stands for when the observers are told of
// it (see Options.ObserveSample), or 0 when they are not: there is no
// observer, or d is an admitted decision left out of the sample.
func (l *Limiter) weight(d *Decision) int64 {
	if l.observer == nil && l.ruleObserver == nil {
		return 0
	}
	return l.weightOf(d.Allowed && !d.ShadowDenied && d.Err == nil)
}

// weightOf is weight for a decision that is clean (admitted, with no
// shadow denial and no store error) or not, on a limiter with an observer.
func (l *Limiter) weightOf(clean bool) int64 {
	switch {
	case l.sample <= 1 || !clean:
		return 1
	case rand.Uint32N(l.sample) == 0:
		return int64(l.sample)
	}
	return 0
}

// report tells the observers of d, the decision read off sh at now (answered:
// the store answered), when it is drawn into their sample (see
// Options.ObserveSample), and fills o when asked.
func (l *Limiter) report(ctx context.Context, sh *sheet, now time.Time, d Decision, answered bool, o *Outcome) {
	w := l.weight(&d)
	if w > 0 && l.ruleObserver != nil {
		rs := sh.rules()
		for i := range rs {
			a := &rs[i]
			l.ruleObserver(ctx, RuleEvent{Limiter: l.name, Rule: a.rule.Name, Key: a.key, Mode: sh.mode, Time: now,
				Denied: answered && !a.res.Allowed, Failed: !answered, Weight: w})
		}
	}
	if o == nil && (w == 0 || l.observer == nil) {
		return
	}
	full := Outcome{Decision: d, Rules: ruleDecisions(sh, d, answered), limiter: l.name, id: sh.ticket, cost: sh.cost}
	if o != nil {
		*o = full
	}
	if w > 0 && l.observer != nil {
		l.observer(ctx, Event{Limiter: l.name, Mode: sh.mode, Cost: sh.cost, Time: now, Outcome: full, Weight: w})
	}
}
