package floodgate

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// The decision path. Every decision (Allow, AllowKey, AllowN, Peek,
// Record, Decide) runs decide: bind the rules that apply to the request,
// send them to the store in one call (exec), read the Decision off the
// answers (verdict, or the failure policy's), and tell the observers.
// Refunds, resets and give-backs build their sheet another way and send it
// through the same exec.

// sheet is one store call in the making and, once answered, its answers:
// the applied rules, each with its key, its limits for this request and
// the store's answer. Decision, Outcome and Event are read off it. Its
// first store.MaxCallOps rules are kept as the store.Call that decides
// them and the store.Answer it gets, so that a store that binds is handed
// the call as it stands and its answer is the sheet's, neither copied
// rule by rule; the rules past them are in more.
// (It holds the time as a number: a time.Time holds a pointer, which an
// Event handed to an observer would take to the heap with the sheet and
// the caller's array of its rules.)
type sheet struct {
	// call is the decision (Mode, Now µs since the Unix epoch by the
	// limiter's clock, Cost, Ticket, and a reservation's Hold, held by
	// the reservable rules) and its first ops: each rule's index, key,
	// limits where this request changes them (0 where it does not),
	// stamp (an input of refund and settle) and whether it holds the
	// Hold. Its N is set as it goes out (exec).
	call store.Call
	// ans is the store's answer to call: Allowed, a consume was admitted
	// and charged, and each rule's result and stamp (an output of
	// consume and record).
	ans   store.Answer
	n     int // applied rules
	rules [store.MaxCallOps]*compiledRule
	more  []applied // the applied rules past the first store.MaxCallOps
}

// applied is one applied rule of a decision past a sheet's call: its key,
// its limits for this request (0: the rule's), and the store's answer.
type applied struct {
	rule         *compiledRule
	key          string
	limit, burst int64
	held         bool
	stamp        int64 // an input of refund and settle, an output of consume and record
	res          store.Result
}

// holdAsk is a reservation's ask: units held for time.
type holdAsk struct {
	units int64
	time  time.Duration
}

// add appends rule r's op for key under limit and burst where they are
// not r's (0 where they are), holding the sheet's Hold when held, with
// stamp (a refund's and a settlement's).
func (sh *sheet) add(r *compiledRule, key string, limit, burst int64, held bool, stamp int64) {
	if i, c := sh.n, &sh.call; i < store.MaxCallOps {
		sh.rules[i], c.Rules[i], c.Keys[i], c.Held[i], c.Stamps[i] = r, r.index, key, held, stamp
		c.Limits[i], c.Bursts[i] = limit, burst
	} else {
		sh.more = append(sh.more, applied{rule: r, key: key, limit: limit, burst: burst, held: held, stamp: stamp})
	}
	sh.n++
}

// op is rule i's op as a store is sent it: its rule, key, limits where
// they are not the rule's (0 where they are), whether it holds the Hold,
// and its stamp.
func (sh *sheet) op(i int) (r *compiledRule, key string, limit, burst int64, held bool, stamp int64) {
	if i < store.MaxCallOps {
		c := &sh.call
		return sh.rules[i], c.Keys[i], c.Limits[i], c.Bursts[i], c.Held[i], c.Stamps[i]
	}
	a := &sh.more[i-store.MaxCallOps]
	return a.rule, a.key, a.limit, a.burst, a.held, a.stamp
}

// limits are rule i's limit and burst for this request.
func (sh *sheet) limits(i int) (limit, burst int64) {
	r, _, limit, burst, _, _ := sh.op(i)
	if limit == 0 {
		limit = r.params.Limit
	}
	if burst == 0 {
		burst = r.params.Burst
	}
	return limit, burst
}

// results are the sheet's rules and the store's results for them, in
// order: its call's and answer's, or, past store.MaxCallOps rules, all of
// them gathered in slices of their own.
func (sh *sheet) results() ([]*compiledRule, []store.Result) {
	if sh.n <= store.MaxCallOps {
		return sh.rules[:sh.n], sh.ans.Results[:sh.n]
	}
	rules := append(make([]*compiledRule, 0, sh.n), sh.rules[:]...)
	res := append(make([]store.Result, 0, sh.n), sh.ans.Results[:]...)
	for i := range sh.more {
		rules, res = append(rules, sh.more[i].rule), append(res, sh.more[i].res)
	}
	return rules, res
}

// answer is where the store's answer to rule i goes: its result and stamp.
func (sh *sheet) answer(i int) (*store.Result, *int64) {
	if i < store.MaxCallOps {
		return &sh.ans.Results[i], &sh.ans.Stamps[i]
	}
	a := &sh.more[i-store.MaxCallOps]
	return &a.res, &a.stamp
}

// res is the store's result for rule i.
func (sh *sheet) res(i int) *store.Result {
	res, _ := sh.answer(i)
	return res
}

// overrides are p's limits where they are not r's (0 where they are), as
// a sheet carries them.
func (r *compiledRule) overrides(p *store.Params) (limit, burst int64) {
	if p.Limit == r.params.Limit && p.Burst == r.params.Burst {
		return 0, 0
	}
	return p.Limit, p.Burst
}

// decide makes one decision of mode and cost for a request with attrs
// or, from AllowKey, for key, the key of every rule keyed on one attribute
// (the attributes and the key are apart: a struct holding both would make
// the compiler think the attributes escape wherever the key does); a
// reservation (Reserve) when h is not nil. o, when not nil, receives it
// in full.
func (l *Limiter) decide(ctx context.Context, mode Mode, cost int64, attrs Attributes, key string, h *holdAsk, o *Outcome) Decision {
	if l.one != nil && h == nil {
		return l.decideOne(ctx, mode, cost, attrs, key, o)
	}
	return l.decideRules(ctx, mode, cost, attrs, key, h, o)
}

// decideRules is decide on the limiter's rules, any number of them.
func (l *Limiter) decideRules(ctx context.Context, mode Mode, cost int64, attrs Attributes, key string, h *holdAsk, o *Outcome) (d Decision) {
	now := l.clock.Now()
	sh := sheet{call: store.Call{Mode: mode, Cost: cost, Now: now.UnixMicro()}}
	if h != nil {
		sh.call.Hold = store.Hold{Units: h.units, Until: sh.call.Now + h.time.Microseconds()}
	}
	err := l.bind(ctx, attrs, key, &sh)
	if err == nil && sh.n > 0 {
		if mode != ModePeek && (o != nil || l.leases) {
			sh.call.Ticket = rand.Uint64() | 1 // the lease id, and the ticket's
		}
		err = l.exec(ctx, &sh)
	}
	switch {
	case err != nil:
		d = l.failed(ctx, &sh, err)
	case sh.n == 0:
		d.Allowed = true // no rule applies to this request
	case sh.n == 1:
		limit, _ := sh.limits(0)
		ruleVerdict(&d, sh.rules[0], mode, sh.ans.Allowed, &sh.ans.Results[0], limit)
	default:
		verdict(&d, &sh)
	}
	if o != nil || l.observer != nil {
		l.report(ctx, &sh, now, d, err == nil, o)
	}
	return d
}

// decideOne is decide for a limiter of one rule whose limits no request
// changes, over a store that binds it (Limiter.one): the commonest
// decision, asked of the store in registers (store.Bound.One), with a
// sheet only for an Outcome or an Event. A request without the rule's key
// goes the general way. BenchmarkOneRule shows what it saves.
func (l *Limiter) decideOne(ctx context.Context, mode Mode, cost int64, attrs Attributes, key string, o *Outcome) (d Decision) {
	r := l.one
	if key == "" || len(r.Key) == 0 {
		key = r.keyFor(attrs)
	}
	if key == "" {
		return l.decideRules(ctx, mode, cost, attrs, "", nil, o)
	}
	now := l.clock.Now()
	var ticket uint64
	if mode != ModePeek && (o != nil || l.leases) {
		ticket = rand.Uint64() | 1 // the lease id, and the ticket's
	}
	res, stamp, admitted := l.bound.One(mode, now.UnixMicro(), cost, ticket, key, 0, 0)
	ruleVerdict(&d, r, mode, admitted, &res, r.params.Limit)
	if o != nil || l.observer != nil {
		sh := sheet{call: store.Call{Mode: mode, Cost: cost, Ticket: ticket, Now: now.UnixMicro()}}
		sh.add(r, key, 0, 0, false, 0)
		sh.ans.Allowed, sh.ans.Results[0], sh.ans.Stamps[0] = admitted, res, stamp
		l.report(ctx, &sh, now, d, true, o)
	}
	return d
}

// bind adds to sh every rule that applies to a request with attrs (or,
// not "", the key of the rules keyed on one attribute), with its key and
// its limits for this request. It stops at a limit look-up that fails, and
// returns its error: the rules before it are the decision's; and, under
// RequireKeys, at a keyed rule without a key, with a *KeyError.
func (l *Limiter) bind(ctx context.Context, attrs Attributes, byKey string, sh *sheet) error {
	held := sh.call.Hold.Units > 0
	for _, r := range l.rules {
		key := byKey
		if key == "" || len(r.Key) == 0 {
			key = r.keyFor(attrs)
		}
		if key == "" {
			if l.requireKeys {
				return &KeyError{Limiter: l.name, Rule: r.Name, Attributes: r.Key}
			}
			continue
		}
		var limit, burst int64 // the rule's
		if r.Overrides != nil || r.LimitFunc != nil {
			p, err := r.paramsFor(ctx, attrs)
			if err != nil {
				return err
			}
			limit, burst = r.overrides(&p)
		}
		sh.add(r, key, limit, burst, held && r.Reservable, 0)
	}
	return nil
}

// exec has the store decide sh in one call and fills in its answers: the
// sheet's call as it stands when the store binds (the memory store) and
// the decision fits in it; else as a Batch.
func (l *Limiter) exec(ctx context.Context, sh *sheet) error {
	if l.bound == nil || sh.n > store.MaxCallOps {
		return l.send(ctx, sh)
	}
	sh.call.N = sh.n
	sh.ans = l.bound.Decide(sh.call)
	return nil
}

// send has the store apply sh as a Batch (pooled: a Batch crosses the
// Store interface, so it lives on the heap) and reads the answers back.
func (l *Limiter) send(ctx context.Context, sh *sheet) error {
	b := l.batches.Get().(*store.Batch)
	defer l.batches.Put(b)
	c := &sh.call
	*b = store.Batch{Mode: c.Mode, Now: time.UnixMicro(c.Now), Cost: c.Cost, Ticket: c.Ticket, Hold: c.Hold, Ops: b.Ops[:0]}
	for i := range sh.n {
		r, key, _, _, held, stamp := sh.op(i)
		p := r.params
		p.Limit, p.Burst = sh.limits(i)
		b.Ops = append(b.Ops, store.Op{Scope: r.scope, Key: key, Params: p, Shadow: r.shadow, Held: held, Grant: r.Grant, Stamp: stamp})
	}
	if err := l.store.Apply(ctx, b); err != nil {
		return err
	}
	sh.ans.Allowed = b.Allowed
	for i := range sh.n {
		res, stamp := sh.answer(i)
		*res, *stamp = b.Ops[i].Result, b.Ops[i].Stamp
	}
	return nil
}

// verdict makes d, a zero Decision, the decision read off the store's
// answers in sh, of several rules: the binding rule is chosen among them.
// A denial binds on the enforced rule that denies for longest (never
// first); an admission on the enforced rule with the fewest units left
// (the one that resets last among equals), on a shadow rule only if all
// are shadows.
func verdict(d *Decision, sh *sheet) {
	rules, rs := sh.results()
	denies, fewest, fewestShadow := -1, -1, -1
	for i := range rs {
		r := &rs[i]
		if rules[i].shadow {
			d.ShadowDenied = d.ShadowDenied || !r.Allowed
			if fewestShadow < 0 || fewer(r, &rs[fewestShadow]) {
				fewestShadow = i
			}
			continue
		}
		if fewest < 0 || fewer(r, &rs[fewest]) {
			fewest = i
		}
		if !r.Allowed && (denies < 0 || longer(r, &rs[denies])) {
			denies = i
		}
	}
	d.Allowed = denies < 0
	if sh.call.Mode == ModeConsume {
		d.Allowed = sh.ans.Allowed
	}
	bind := denies
	switch {
	case !d.Allowed:
		r := &rs[bind]
		d.Reason, d.Never = ReasonLimit, r.Never
		if !d.Never {
			d.RetryAfter = r.RetryAfter
		}
	case fewest >= 0:
		bind = fewest
	default:
		bind = fewestShadow
	}
	r := &rs[bind]
	d.Rule = rules[bind].Name
	d.Limit, _ = sh.limits(bind)
	d.Remaining, d.ResetAfter = r.Remaining, r.ResetAfter
}

// fewer reports whether r leaves fewer units than b, or as many and
// resets later.
func fewer(r, b *store.Result) bool {
	return r.Remaining < b.Remaining || r.Remaining == b.Remaining && r.ResetAfter > b.ResetAfter
}

// longer reports whether the denial r lasts longer than b: never, or a
// longer wait.
func longer(r, b *store.Result) bool {
	if r.Never != b.Never {
		return r.Never
	}
	return r.RetryAfter > b.RetryAfter
}

// ruleVerdict makes d, a zero Decision, the decision of mode on one rule
// r, whose answer is res under limit (admitted: a consume was admitted and
// charged): verdict with none of its choices among rules.
func ruleVerdict(d *Decision, r *compiledRule, mode Mode, admitted bool, res *store.Result, limit int64) {
	d.Allowed, d.ShadowDenied = res.Allowed || r.shadow, !res.Allowed && r.shadow
	d.Rule, d.Limit, d.Remaining, d.ResetAfter = r.Name, limit, res.Remaining, res.ResetAfter
	if mode == ModeConsume {
		d.Allowed = admitted
	}
	if !d.Allowed {
		d.Reason, d.Never = ReasonLimit, res.Never
		if !d.Never {
			d.RetryAfter = res.RetryAfter
		}
	}
}

// failed is the decision the store did not answer: an invalid request's
// (a *KeyError), or the failure policy's for a store error.
func (l *Limiter) failed(ctx context.Context, sh *sheet, err error) Decision {
	if ke := (*KeyError)(nil); errors.As(err, &ke) {
		return Decision{Reason: ReasonInvalid, Err: err, Rule: ke.Rule}
	}
	d := Decision{Reason: ReasonStore, Err: err}
	// A shadow limiter never denies, not even when its store fails.
	d.Allowed = l.policy == FailOpen || l.shadow
	if !d.Allowed {
		d.RetryAfter = time.Second
		if re := (*store.RetryError)(nil); errors.As(err, &re) {
			d.RetryAfter = max(re.RetryIn, time.Second)
		}
	}
	if sh.n > 0 {
		d.Rule = sh.rules[0].Name
		d.Limit, _ = sh.limits(0)
	}
	l.logFailure(ctx, "floodgate: store failed; decided by failure policy", err, sh.call.Now)
	return d
}

// logFailure logs at most one failure-policy line a second, with the count
// of the ones it held back.
func (l *Limiter) logFailure(ctx context.Context, msg string, err error, now int64) {
	ns := now * 1000
	last := l.lastLog.Load()
	if ns-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, ns) {
		l.suppressed.Add(1)
		return
	}
	l.logger.WarnContext(ctx, msg,
		"limiter", l.name, "policy", l.policy.String(), "err", err,
		"suppressed", l.suppressed.Swap(0))
}
