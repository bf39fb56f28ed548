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
// the store's answer. Decision, Outcome and Event are read off it. (It
// holds the time as a number: a time.Time holds a pointer, which an Event
// handed to an observer would take to the heap with the sheet and the
// caller's array of its rules.)
type sheet struct {
	mode     Mode
	cost     int64
	hold     store.Hold // a reservation's (Reserve): held by the reservable rules
	ticket   uint64
	now      int64 // µs since the Unix epoch, by the limiter's clock
	admitted bool  // a consume was admitted and charged
	applied  few[applied]
}

// applied is one applied rule of a decision: its key, its limits for this
// request, and the store's answer.
type applied struct {
	rule         *compiledRule
	key          string
	limit, burst int64
	held         bool  // the rule holds the sheet's hold (a reservation)
	stamp        int64 // an output of consume and record, an input of refund and settle
	res          store.Result
}

// holdAsk is a reservation's ask: units held for time.
type holdAsk struct {
	units int64
	time  time.Duration
}

// add appends rule r's op for key under limit and burst, and returns it.
func (sh *sheet) add(r *compiledRule, key string, limit, burst int64) *applied {
	a := sh.applied.next()
	a.rule, a.key, a.limit, a.burst = r, key, limit, burst
	return a
}

// rules are the applied rules.
func (sh *sheet) rules() []applied { return sh.applied.all() }

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
	sh := sheet{mode: mode, cost: cost, now: now.UnixMicro()}
	if h != nil {
		sh.hold = store.Hold{Units: h.units, Until: sh.now + h.time.Microseconds()}
	}
	err := l.bind(ctx, attrs, key, &sh)
	if err == nil && sh.applied.n > 0 {
		if mode != ModePeek && (o != nil || l.leases) {
			sh.ticket = rand.Uint64() | 1 // the lease id, and the ticket's
		}
		err = l.exec(ctx, &sh)
	}
	switch {
	case err != nil:
		d = l.failed(ctx, &sh, err)
	case sh.applied.n == 0:
		d.Allowed = true // no rule applies to this request
	case sh.applied.n == 1:
		a := &sh.applied.inline[0]
		d = ruleVerdict(a.rule, mode, sh.admitted, &a.res, a.limit)
	default:
		d = verdict(&sh)
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
func (l *Limiter) decideOne(ctx context.Context, mode Mode, cost int64, attrs Attributes, key string, o *Outcome) Decision {
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
	d := ruleVerdict(r, mode, admitted, &res, r.params.Limit)
	if o != nil || l.observer != nil {
		sh := sheet{mode: mode, cost: cost, ticket: ticket, now: now.UnixMicro(), admitted: admitted}
		a := sh.add(r, key, r.params.Limit, r.params.Burst)
		a.res, a.stamp = res, stamp
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
		limit, burst := r.params.Limit, r.params.Burst
		if r.Overrides != nil || r.LimitFunc != nil {
			p, err := r.paramsFor(ctx, attrs)
			if err != nil {
				return err
			}
			limit, burst = p.Limit, p.Burst
		}
		sh.add(r, key, limit, burst).held = r.Reservable && sh.hold.Units > 0
	}
	return nil
}

// exec has the store decide sh in one call and fills in its answers: by
// value when the store binds (the memory store), and its decision fits in
// a store.Call; else as a Batch.
func (l *Limiter) exec(ctx context.Context, sh *sheet) error {
	if l.bound == nil || sh.applied.n > store.MaxCallOps {
		return l.send(ctx, sh)
	}
	c := store.Call{Mode: sh.mode, Now: sh.now, Cost: sh.cost, Ticket: sh.ticket, N: sh.applied.n, Hold: sh.hold}
	rs := sh.rules()
	for i := range rs {
		a := &rs[i]
		c.Rules[i], c.Keys[i], c.Stamps[i], c.Held[i] = a.rule.index, a.key, a.stamp, a.held
		c.Limits[i], c.Bursts[i] = a.overrides()
	}
	ans := l.bound.Decide(c)
	sh.admitted = ans.Allowed
	for i := range rs {
		rs[i].res, rs[i].stamp = ans.Results[i], ans.Stamps[i]
	}
	return nil
}

// overrides are a's limits where they are not its rule's (0 where they
// are), as a store.Call carries them.
func (a *applied) overrides() (limit, burst int64) {
	p := &a.rule.params
	if a.limit == p.Limit && a.burst == p.Burst {
		return 0, 0
	}
	return a.limit, a.burst
}

// send has the store apply sh as a Batch (pooled: a Batch crosses the
// Store interface, so it lives on the heap) and reads the answers back.
func (l *Limiter) send(ctx context.Context, sh *sheet) error {
	b := l.batches.Get().(*store.Batch)
	defer l.batches.Put(b)
	*b = store.Batch{Mode: sh.mode, Now: time.UnixMicro(sh.now), Cost: sh.cost, Ticket: sh.ticket, Hold: sh.hold, Ops: b.Ops[:0]}
	rs := sh.rules()
	for i := range rs {
		a := &rs[i]
		r := a.rule
		p := r.params
		p.Limit, p.Burst = a.limit, a.burst
		b.Ops = append(b.Ops, store.Op{Scope: r.scope, Key: a.key, Params: p, Shadow: r.shadow, Held: a.held, Grant: r.Grant, Stamp: a.stamp})
	}
	if err := l.store.Apply(ctx, b); err != nil {
		return err
	}
	sh.admitted = b.Allowed
	for i := range rs {
		rs[i].res, rs[i].stamp = b.Ops[i].Result, b.Ops[i].Stamp
	}
	return nil
}

// verdict reads the decision off the store's answers in sh, of several
// rules: the binding rule is chosen among them.
func verdict(sh *sheet) Decision {
	rs := sh.rules()
	var d Decision
	d.Allowed = true
	for i := range rs {
		if !rs[i].res.Allowed {
			if rs[i].rule.shadow {
				d.ShadowDenied = true
			} else {
				d.Allowed = false
			}
		}
	}
	if sh.mode == ModeConsume {
		d.Allowed = sh.admitted
	}
	bind := -1
	if !d.Allowed {
		d.Reason = ReasonLimit
		for i := range rs {
			r := &rs[i].res
			if r.Allowed || rs[i].rule.shadow {
				continue
			}
			switch b := &rs[max(bind, 0)].res; {
			case bind < 0:
				bind = i
			case r.Never != b.Never:
				if r.Never {
					bind = i
				}
			case r.RetryAfter > b.RetryAfter:
				bind = i
			}
		}
		r := &rs[bind].res
		d.Never = r.Never
		if !d.Never {
			d.RetryAfter = r.RetryAfter
		}
	} else {
		// The enforced rule with the fewest units left binds, the one that
		// resets last among equals; a shadow rule only if all are shadows.
		for pass := 0; pass < 2 && bind < 0; pass++ {
			for i := range rs {
				if pass == 0 && rs[i].rule.shadow {
					continue
				}
				r := &rs[i].res
				if bind < 0 {
					bind = i
					continue
				}
				b := &rs[bind].res
				if r.Remaining < b.Remaining || r.Remaining == b.Remaining && r.ResetAfter > b.ResetAfter {
					bind = i
				}
			}
		}
	}
	a := &rs[bind]
	d.Rule, d.Limit = a.rule.Name, a.limit
	d.Remaining, d.ResetAfter = a.res.Remaining, a.res.ResetAfter
	return d
}

// ruleVerdict is the decision of mode on one rule r, whose answer is res
// under limit (admitted: a consume was admitted and charged): verdict with
// none of its choices among rules.
func ruleVerdict(r *compiledRule, mode Mode, admitted bool, res *store.Result, limit int64) Decision {
	d := Decision{
		Allowed: res.Allowed || r.shadow, ShadowDenied: !res.Allowed && r.shadow,
		Rule: r.Name, Limit: limit, Remaining: res.Remaining, ResetAfter: res.ResetAfter,
	}
	if mode == ModeConsume {
		d.Allowed = admitted
	}
	if !d.Allowed {
		d.Reason, d.Never = ReasonLimit, res.Never
		if !d.Never {
			d.RetryAfter = res.RetryAfter
		}
	}
	return d
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
	if sh.applied.n > 0 {
		d.Rule, d.Limit = sh.applied.inline[0].rule.Name, sh.applied.inline[0].limit
	}
	l.logFailure(ctx, "floodgate: store failed; decided by failure policy", err, sh.now)
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
