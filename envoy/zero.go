package envoy

import (
	"context"

	"github.com/floodgate-go/floodgate"
)

// A limit of 0 requests per unit (a block list) refuses every request
// without a counter, so no floodgate limiter decides it. Its refusals are
// still decisions an operator must see: each is told to the Observer as a
// denial (a shadow denial for a shadow limit) of a rule of limit 0 named
// like the limit's floodgate rule, under the domain's limiter name, so
// that floodgate_decisions_total and the top keys count them.

// observeZero tells the Observer of descriptor key's refusal by lf, a
// limit of 0 requests per unit of domain d, at cost c.
func (st *state) observeZero(ctx context.Context, d *domain, lf *leaf, key string, c int64) {
	obs := st.opts.Limiter.Observer
	if obs == nil {
		return
	}
	o := st.zeroOutcome(lf, key)
	e := floodgate.Event{Limiter: limiterName(d.name), Mode: floodgate.ModeConsume, Cost: c, Time: st.clock.Now(), Decision: o.Decision, Weight: 1}
	e.AddRule(floodgate.RuleEvent{Rule: lf.rule, Key: key, Denied: true, Shadow: o.ShadowDenied})
	obs(ctx, e)
}

// zeroOutcome is the refusal of descriptor key by lf, a limit of 0
// requests per unit, as a floodgate decision of lf's rule.
func (st *state) zeroOutcome(lf *leaf, key string) floodgate.Outcome {
	shadow := lf.shadow || st.opts.Limiter.Shadow
	dec := floodgate.Decision{Allowed: shadow, ShadowDenied: shadow, Never: !shadow, Rule: lf.rule}
	if !shadow {
		dec.Reason = floodgate.ReasonLimit
	}
	return floodgate.Outcome{Decision: dec, Rules: []floodgate.RuleDecision{{Name: lf.rule, Key: key, Shadow: shadow, Never: true}}}
}

// zeroRules describes d's limits of 0 requests per unit as floodgate
// rules of limit 0, the rules their refusals are reported under.
func (d *domain) zeroRules() []floodgate.Rule {
	rules := make([]floodgate.Rule, len(d.zeros))
	for i, l := range d.zeros {
		rules[i] = floodgate.Rule{Name: l.rule, Algorithm: floodgate.FixedWindow, Align: floodgate.AlignClock,
			Window: l.window, Key: []string{l.rule}, Shadow: l.shadow}
	}
	return rules
}
