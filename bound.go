package floodgate

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// The bound path. A limiter over an in-process store (a store.Binder) with
// at most store.MaxBound rules binds its rules to the store once, in New:
// each rule's scope, parameters and shadow flag are the store's from then
// on. A consume, peek or record is then a store.Call, by value: the rules'
// keys and this request's limits where an override or a limit function
// changed them. No Batch is built, pooled or read back, and nothing crosses
// the Store interface by pointer. The store decides a Call exactly as it
// applies the Batch of the same ops (storetest runs every store that binds
// both ways), and the decision is read off the same sheet as a Batch's.

// boundRules are l's rules as a store binds them.
func (l *Limiter) boundRules() []store.BoundRule {
	out := make([]store.BoundRule, len(l.rules))
	for i, r := range l.rules {
		out[i] = store.BoundRule{Scope: r.scope, Params: r.params, Shadow: r.shadow}
	}
	return out
}

// bindCall fills c with the keys of the rules that apply to attrs and the
// limits an override or a limit function gives them.
func (l *Limiter) bindCall(ctx context.Context, c *store.Call, attrs Attributes) error {
	for i, r := range l.rules {
		key := r.keyFor(attrs)
		if key == "" {
			continue
		}
		c.Keys[i] = key
		if r.Overrides != nil || r.LimitFunc != nil {
			p, err := r.paramsFor(ctx, attrs)
			if err != nil {
				c.Keys[i] = "" // the rules before it are the decision's
				return err
			}
			c.Limits[i], c.Bursts[i] = p.Limit, p.Burst
		}
	}
	return nil
}

// bindOne is bindCall for a limiter of one rule: the rule's key for attrs
// and the limits an override or a limit function gives it.
func (l *Limiter) bindOne(ctx context.Context, attrs Attributes) (key string, limit, burst int64, err error) {
	r := l.rules[0]
	if key = r.keyFor(attrs); key == "" || r.Overrides == nil && r.LimitFunc == nil {
		return key, 0, 0, nil
	}
	p, err := r.paramsFor(ctx, attrs)
	if err != nil {
		return "", 0, 0, err
	}
	return key, p.Limit, p.Burst, nil
}

// allowOne is a consume of one unit on a lean limiter (see Limiter.lean)
// for the rule's key ("" skips it): decideOne with no Event to build, no
// lease id and no request's limits to carry, kept short (BenchmarkCompare).
func (l *Limiter) allowOne(ctx context.Context, key string) Decision {
	if key == "" {
		return Decision{Allowed: true} // no rule applies to this request
	}
	r := l.rules[0]
	now := l.clock.Now()
	res, _, admitted := l.bound.One(ModeConsume, now.UnixMicro(), 1, 0, key, 0, 0)
	// The verdict is written twice so that the unobserved branch returns
	// it straight, without a copy (about 10 instructions: BenchmarkCompare
	// under cachegrind, docs/benchmarks.md).
	if l.ruleObserver == nil {
		return ruleVerdict(r, ModeConsume, admitted, &res, r.params.Limit)
	}
	d := ruleVerdict(r, ModeConsume, admitted, &res, r.params.Limit)
	l.tellRule(ctx, d.Allowed && !d.ShadowDenied, ModeConsume, key, now, !res.Allowed)
	return d
}

// tellRule tells the RuleObserver of the one rule's part in a decision of
// mode on key at now, denied by the rule or not, when the decision is drawn
// into the sample (clean: it is admitted without a shadow denial; see
// weightOf).
func (l *Limiter) tellRule(ctx context.Context, clean bool, mode Mode, key string, now time.Time, denied bool) {
	if w := l.weightOf(clean); w > 0 {
		l.ruleObserver(ctx, RuleEvent{Limiter: l.name, Rule: l.rules[0].Name, Key: key, Mode: mode, Time: now, Denied: denied, Weight: w})
	}
}

// decideOne is decideBound for a limiter of one rule, whose key is key
// ("" skips it) and whose limits for this request are limit and burst
// (0: the rule's): the commonest decision, with no Call to build, and the
// Decision read straight off the rule's answer. The sheet is made only for
// o or an observed decision.
func (l *Limiter) decideOne(ctx context.Context, mode Mode, cost int64, key string, limit, burst int64, err error, o *Outcome) Decision {
	now := l.clock.Now()
	if key == "" || err != nil {
		return l.conclude(ctx, &sheet{mode: mode, cost: cost}, now, err, o)
	}
	var ticket uint64
	if mode != ModePeek && (o != nil || l.leases) {
		ticket = rand.Uint64() | 1 // the lease id, and the ticket's
	}
	r := l.rules[0]
	res, stamp, admitted := l.bound.One(mode, now.UnixMicro(), cost, ticket, key, limit, burst)
	if limit == 0 {
		limit, burst = r.params.Limit, r.params.Burst
	}
	d := ruleVerdict(r, mode, admitted, &res, limit)
	if o == nil && l.observer == nil { // told to the RuleObserver alone, if any: no sheet
		if l.ruleObserver != nil {
			l.tellRule(ctx, d.Allowed && !d.ShadowDenied, mode, key, now, !res.Allowed)
		}
		return d
	}
	w := l.weight(&d)
	if o == nil && w == 0 {
		return d
	}
	rules := [1]applied{{rule: r, key: key, limit: limit, burst: burst, stamp: stamp, res: res}}
	sh := sheet{mode: mode, cost: cost, ticket: ticket, admitted: admitted, rules: rules[:]}
	return l.report(ctx, &sh, now, d, true, w, o)
}

// decideBound makes one decision of mode and cost on the bound rules with
// the keys and limits of c (or, when err is not nil, the failure policy's).
// o, when not nil, receives it in full.
func (l *Limiter) decideBound(ctx context.Context, mode Mode, cost int64, c *store.Call, err error, o *Outcome) Decision {
	now := l.clock.Now()
	var buf [store.MaxBound]applied
	n := 0
	for i, r := range l.rules {
		if c.Keys[i] == "" {
			continue
		}
		a := &buf[n]
		a.rule, a.key, a.limit, a.burst = r, c.Keys[i], r.params.Limit, r.params.Burst
		if c.Limits[i] != 0 {
			a.limit, a.burst = c.Limits[i], c.Bursts[i]
		}
		n++
	}
	sh := sheet{mode: mode, cost: cost, rules: buf[:n]}
	if err == nil && len(sh.rules) > 0 {
		c.Mode, c.Now, c.Cost = mode, now.UnixMicro(), cost
		if mode != ModePeek && (o != nil || l.leases) {
			c.Ticket = rand.Uint64() | 1 // the lease id, and the ticket's
			sh.ticket = c.Ticket
		}
		ans := l.bound.Decide(*c)
		sh.admitted = ans.Allowed
		for j := range sh.rules {
			sh.rules[j].res, sh.rules[j].stamp = ans.Results[j], ans.Stamps[j]
		}
	}
	return l.conclude(ctx, &sh, now, err, o)
}
