package floodgate

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// FailurePolicy says what a decision is when the store cannot answer.
type FailurePolicy uint8

const (
	// FailOpen admits with reason store (the default).
	FailOpen FailurePolicy = iota
	// FailClosed denies with reason store; use it for login and other
	// abuse-sensitive limiters.
	FailClosed
)

// String returns "open" or "closed".
func (p FailurePolicy) String() string {
	if p == FailClosed {
		return "closed"
	}
	return "open"
}

// ParseFailurePolicy parses "open" or "closed" ("" means open).
func ParseFailurePolicy(s string) (FailurePolicy, error) {
	switch s {
	case "", "open":
		return FailOpen, nil
	case "closed":
		return FailClosed, nil
	}
	return 0, sprintfErr("unknown failure policy %q (want open or closed)", s)
}

// DefaultTimeout is the default deadline of one store call.
const DefaultTimeout = 50 * time.Millisecond

// Options are a limiter's optional settings. The zero value is ready to use.
type Options struct {
	// Clock supplies the time of in-process stores; nil means the wall
	// clock read through a shared FastClock (see FastClock for how it
	// differs from SystemClock).
	Clock Clock
	// FailurePolicy decides when the store cannot answer; default FailOpen.
	FailurePolicy FailurePolicy
	// Shadow runs the whole limiter dark: every rule is a shadow rule.
	Shadow bool
	// Timeout is the deadline of each store call; 0 means DefaultTimeout.
	// In-process stores are not given one.
	Timeout time.Duration
	// Breaker tunes the circuit breaker around remote stores.
	Breaker BreakerOptions
	// Observer, when set, is called after every decision (consume, peek
	// and record), for metrics and audit. Refunds and resets are not
	// decisions and are not observed.
	Observer Observer
	// Logger receives failure-policy decisions (at most one line a second
	// per limiter) and refunds that could not be applied; nil means
	// slog.Default().
	Logger *slog.Logger
	// Replaces is the live limiter of the same name on the same store that
	// this one takes over from: a configuration reload builds the new
	// version while the old one still serves, and both count in the same
	// keys, by design. Without it, a second live limiter of a name the
	// store already serves with other rules is an error (see Close).
	Replaces *Limiter
}

// Observer is called once per decision with what was decided. It must not
// retain the Event's Decision after it returns.
type Observer func(ctx context.Context, e Event)

// Event describes one decision for an Observer.
type Event struct {
	Limiter string
	Mode    Mode
	Cost    int64
	// Time is when the decision was made, by the limiter's clock.
	Time     time.Time
	Decision *Decision
}

// Limiter applies a set of rules to requests. It is safe for concurrent use.
type Limiter struct {
	name     string
	store    store.Store
	rules    []*compiledRule
	byName   map[string]*compiledRule
	clock    Clock
	policy   FailurePolicy
	shadow   bool
	timeout  time.Duration
	remote   bool
	breaker  *breaker
	observer Observer
	logger   *slog.Logger
	opts     Options // as given to New, for views made with Only

	held       *nameHold // the limiter's hold on its name (names.go)
	batches    sync.Pool
	lastLog    atomic.Int64
	suppressed atomic.Int64
}

// New returns a limiter named name that keeps its state in store and applies
// rules, all of which must admit a request. opts may be nil. It returns a
// *ConfigError naming the limiter, rule and field of any misconfiguration,
// and for a name that another live limiter with other rules already uses
// on store (see Options.Replaces and Close).
func New(name string, st store.Store, rules []Rule, opts *Options) (*Limiter, error) {
	if name == "" {
		return nil, limiterError("", "name", "must not be empty")
	}
	if !validName(name) {
		return nil, limiterError(name, "name", "may hold only letters, digits, '.', '_' and '-'")
	}
	if st == nil {
		return nil, limiterError(name, "store", "must not be nil")
	}
	if len(rules) == 0 {
		return nil, limiterError(name, "rules", "must hold at least one rule")
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.FailurePolicy > FailClosed {
		return nil, limiterError(name, "failure_policy", "unknown policy")
	}
	if opts.Timeout < 0 {
		return nil, limiterError(name, "timeout", "must not be negative")
	}
	l := &Limiter{
		name:     name,
		store:    st,
		byName:   make(map[string]*compiledRule, len(rules)),
		clock:    opts.Clock,
		policy:   opts.FailurePolicy,
		shadow:   opts.Shadow,
		timeout:  opts.Timeout,
		breaker:  newBreaker(opts.Breaker),
		observer: opts.Observer,
		logger:   opts.Logger,
		opts:     *opts,
	}
	l.opts.Replaces = nil // a view (Only) must not keep the replaced limiter alive
	if l.clock == nil {
		l.clock = defaultClock
	}
	if l.timeout == 0 {
		l.timeout = DefaultTimeout
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	if ip, ok := st.(store.InProcess); !ok || !ip.InProcess() {
		l.remote = true
	}
	for i, r := range rules {
		c, err := compileRule(name, i, r)
		if err != nil {
			return nil, err
		}
		if _, dup := l.byName[r.Name]; dup {
			return nil, &ConfigError{Limiter: name, Rule: r.Name, RuleIndex: i, Field: "name", Reason: "duplicate rule name"}
		}
		l.byName[r.Name] = c
		l.rules = append(l.rules, c)
	}
	if err := l.hold(opts.Replaces); err != nil {
		return nil, err
	}
	n := len(rules)
	l.batches.New = func() any { return &store.Batch{Ops: make([]store.Op, 0, n)} }
	return l, nil
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Rules returns a copy of the limiter's rules, with defaults applied.
func (l *Limiter) Rules() []Rule {
	out := make([]Rule, len(l.rules))
	for i, c := range l.rules {
		out[i] = c.withDefaults()
	}
	return out
}

// Rule returns a copy of the rule named name, with defaults applied, and
// whether the limiter has it: the rule behind a Decision's Rule or a
// RuleDecision's Name, without copying them all.
func (l *Limiter) Rule(name string) (Rule, bool) {
	c := l.byName[name]
	if c == nil {
		return Rule{}, false
	}
	return c.withDefaults(), true
}

// FailurePolicy returns the limiter's failure policy.
func (l *Limiter) FailurePolicy() FailurePolicy { return l.policy }

// Shadow reports whether the whole limiter runs dark.
func (l *Limiter) Shadow() bool { return l.shadow }

// Breaker returns the state of the limiter's circuit breaker.
func (l *Limiter) Breaker() BreakerState { return BreakerState(l.breaker.State()) }

// Allow asks for one unit: shorthand for AllowN(ctx, attrs, 1).
func (l *Limiter) Allow(ctx context.Context, attrs Attributes) (d Decision) {
	l.decide(ctx, ModeConsume, attrs, 1, &d)
	return d
}

// AllowN asks for n units. Every applicable rule must admit n for the
// decision to be admitted, and then n is charged to every one of them; a
// denied decision charges nothing. n == 0 peeks: nothing is charged and
// Allowed says whether one unit would be admitted now.
func (l *Limiter) AllowN(ctx context.Context, attrs Attributes, n int64) (d Decision, err error) {
	if n < 0 {
		return Decision{}, sprintfErr("floodgate: limiter %q: cost %d must not be negative", l.name, n)
	}
	if n == 0 {
		l.decide(ctx, ModePeek, attrs, 1, &d)
		return d, nil
	}
	l.decide(ctx, ModeConsume, attrs, n, &d)
	return d, nil
}

// Peek reports whether n units would be admitted now, charging nothing.
func (l *Limiter) Peek(ctx context.Context, attrs Attributes, n int64) (d Decision, err error) {
	if n < 1 {
		return Decision{}, sprintfErr("floodgate: limiter %q: peek cost %d must be at least 1", l.name, n)
	}
	l.decide(ctx, ModePeek, attrs, n, &d)
	return d, nil
}

// Record charges n units to every applicable rule without an admission
// check: usage known only after the work is done. It may push keys past
// their limits; later decisions are then denied until the usage ages out.
// The decision describes the state afterwards, as a peek at one unit.
func (l *Limiter) Record(ctx context.Context, attrs Attributes, n int64) (d Decision, err error) {
	if n < 0 {
		return Decision{}, sprintfErr("floodgate: limiter %q: recorded cost %d must not be negative", l.name, n)
	}
	l.decide(ctx, ModeRecord, attrs, n, &d)
	return d, nil
}

// Refund gives an admitted decision's units back to every rule it charged,
// while the window they were counted in is current; for Concurrency rules it
// releases the lease. A ticket is refunded at most once. A refund that cannot
// be applied leaves the limiter stricter, never looser: it is logged and its
// error returned, and callers may ignore that error.
func (l *Limiter) Refund(ctx context.Context, t Ticket) error {
	if !t.Valid() {
		return nil
	}
	if t.Limiter != l.name {
		return ErrForeignTicket
	}
	b := l.batch()
	defer l.batches.Put(b)
	b.Mode, b.Now, b.Cost, b.Ticket = store.Refund, l.clock.Now(), t.Cost, t.ID
	for _, e := range t.Entries {
		c := l.byName[e.Rule]
		if c == nil {
			continue // the rule was removed since: nothing to give back
		}
		b.Ops = append(b.Ops, store.Op{Scope: c.scope, Key: e.Key, Params: c.refundParams(e), Stamp: e.Stamp})
	}
	if len(b.Ops) == 0 {
		return nil
	}
	if err := l.apply(ctx, b); err != nil {
		l.logger.WarnContext(ctx, "floodgate: refund not applied", "limiter", l.name, "err", err)
		return err
	}
	return nil
}

// Reset forgets the state of every rule's key for attrs (an admin action).
func (l *Limiter) Reset(ctx context.Context, attrs Attributes) error {
	b := l.batch()
	defer l.batches.Put(b)
	b.Mode, b.Now = store.Reset, l.clock.Now()
	for _, c := range l.rules {
		if key := c.keyFor(attrs); key != "" {
			b.Ops = append(b.Ops, store.Op{Scope: c.scope, Key: key, Params: c.params})
		}
	}
	if len(b.Ops) == 0 {
		return nil
	}
	return l.apply(ctx, b)
}

func (l *Limiter) batch() *store.Batch {
	b := l.batches.Get().(*store.Batch)
	b.Ops = b.Ops[:0]
	b.Allowed = false
	b.Ticket = 0
	return b
}

// decide makes the decision for attrs into d, which must be the zero
// Decision. It writes d in place rather than returning it: a Decision is a
// few hundred bytes, and copying it is a measurable part of the hot path.
func (l *Limiter) decide(ctx context.Context, mode Mode, attrs Attributes, cost int64, d *Decision) {
	d.limiter, d.cost = l, cost
	b := l.batch()
	b.Mode, b.Now, b.Cost = mode, l.clock.Now(), cost
	var err error
	for _, c := range l.rules {
		key := c.keyFor(attrs)
		if key == "" {
			continue
		}
		// The op is filled in place: building it aside and appending
		// would copy its 150 bytes once more.
		b.Ops = append(b.Ops, store.Op{})
		op := &b.Ops[len(b.Ops)-1]
		op.Params = c.params
		if c.Overrides != nil || c.LimitFunc != nil {
			if op.Params, err = c.paramsFor(ctx, attrs); err != nil {
				b.Ops = b.Ops[:len(b.Ops)-1]
				break
			}
		}
		op.Scope, op.Key, op.Shadow = c.scope, key, c.Shadow || l.shadow
		p := &op.Params
		rd := d.ruleSlot()
		rd.Name, rd.rule, rd.key, rd.Shadow, rd.Limit = c.Name, c.index, key, c.Shadow || l.shadow, p.Limit
		rd.burst = p.Burst
	}
	switch {
	case err != nil:
		l.failed(ctx, d, err, b.Now)
	case len(b.Ops) == 0:
		d.Allowed = true // no rule applies to this request
	default:
		if mode == ModeConsume || mode == ModeRecord {
			b.Ticket = rand.Uint64() | 1
			d.id = b.Ticket
		}
		if err = l.apply(ctx, b); err != nil {
			l.failed(ctx, d, err, b.Now)
		} else {
			l.fill(d, b)
		}
	}
	now := b.Now
	l.batches.Put(b)
	if l.observer != nil {
		l.observe(ctx, mode, cost, now, d)
	}
}

// observed recycles the copies of decisions handed to the observer, which
// must not retain them, so an observed limiter does not allocate per
// decision either.
var observed = sync.Pool{New: func() any { return new(Decision) }}

// observe calls the observer with a copy of d: handing it d itself would
// make every Decision escape to the heap, observer or not.
func (l *Limiter) observe(ctx context.Context, mode Mode, cost int64, now time.Time, d *Decision) {
	c := observed.Get().(*Decision)
	*c = *d
	l.observer(ctx, Event{Limiter: l.name, Mode: mode, Cost: cost, Time: now, Decision: c})
	*c = Decision{} // drop references before pooling
	observed.Put(c)
}

// apply runs b against the store, with the deadline and the breaker for
// remote stores.
func (l *Limiter) apply(ctx context.Context, b *store.Batch) error {
	if !l.remote {
		return l.store.Apply(ctx, b)
	}
	now := b.Now.UnixNano()
	if !l.breaker.Allow(now) {
		return ErrBreakerOpen
	}
	// A caller whose own deadline comes first (a gRPC call from Envoy, an
	// HTTP request with a timeout) already bounds the store call: deriving
	// a context would cost a timer and allocations for the same deadline.
	var err error
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= l.timeout {
		err = l.store.Apply(ctx, b)
	} else {
		cctx, cancel := context.WithTimeout(ctx, l.timeout)
		err = l.store.Apply(cctx, b)
		cancel()
	}
	if err != nil {
		if ctx.Err() != nil {
			l.breaker.Abandon()
			return err // the caller gave up: not the store's fault
		}
		if ce := (*store.ConfinedError)(nil); errors.As(err, &ce) {
			// The store isolates the failed part itself; the rest of it
			// answers. A probe that met it brought no verdict.
			l.breaker.Abandon()
			return err
		}
		if l.breaker.Failure(l.clock.Now().UnixNano()) {
			l.logger.Warn("floodgate: store circuit breaker opened", "limiter", l.name, "err", err)
		}
		return err
	}
	if l.breaker.Success() {
		l.logger.Info("floodgate: store circuit breaker closed: decisions are made by the rules again", "limiter", l.name)
	}
	return nil
}

// fill turns the store's answers into the decision.
func (l *Limiter) fill(d *Decision, b *store.Batch) {
	rules := d.Rules()
	enforced := true
	for i := range b.Ops {
		op, rd := &b.Ops[i], &rules[i]
		res := op.Result
		rd.Allowed, rd.Never = res.Allowed, res.Never
		rd.Remaining, rd.ResetAfter, rd.RetryAfter = res.Remaining, res.ResetAfter, res.RetryAfter
		rd.stamp = op.Stamp
		if !res.Allowed {
			if op.Shadow {
				d.ShadowDenied = true
			} else {
				enforced = false
			}
		}
	}
	if b.Mode == ModeConsume {
		enforced = b.Allowed
		for i := range rules {
			rules[i].took = b.Allowed && rules[i].Allowed
		}
	}
	d.Allowed = enforced
	bind := -1
	if !enforced {
		d.Reason = ReasonLimit
		for i := range rules {
			r := &rules[i]
			if r.Allowed || r.Shadow {
				continue
			}
			switch {
			case bind < 0:
				bind = i
			case r.Never != rules[bind].Never:
				if r.Never {
					bind = i
				}
			case r.RetryAfter > rules[bind].RetryAfter:
				bind = i
			}
		}
		d.Never = rules[bind].Never
		if !d.Never {
			d.RetryAfter = rules[bind].RetryAfter
		}
	} else {
		for pass := 0; pass < 2 && bind < 0; pass++ {
			for i := range rules {
				r := &rules[i]
				if pass == 0 && r.Shadow {
					continue
				}
				if bind < 0 || r.Remaining < rules[bind].Remaining ||
					r.Remaining == rules[bind].Remaining && r.ResetAfter > rules[bind].ResetAfter {
					bind = i
				}
			}
		}
	}
	r := &rules[bind]
	d.Rule, d.Limit, d.Remaining, d.ResetAfter = r.Name, r.Limit, r.Remaining, r.ResetAfter
}

// failed makes d the failure policy's decision for a store error.
func (l *Limiter) failed(ctx context.Context, d *Decision, err error, now time.Time) {
	d.Reason, d.Err = ReasonStore, err
	// A shadow limiter never denies, not even when its store fails.
	d.Allowed = l.policy == FailOpen || l.shadow
	if !d.Allowed {
		d.RetryAfter = max(l.breaker.RetryIn(now.UnixNano()), time.Second)
	}
	rs := d.Rules()
	for i := range rs {
		rs[i].Allowed = d.Allowed
	}
	if len(rs) > 0 {
		d.Rule, d.Limit = rs[0].Name, rs[0].Limit
	}
	l.logFailure(ctx, err, now)
}

// logFailure logs at most one failure-policy line a second, with the count
// of the ones it held back.
func (l *Limiter) logFailure(ctx context.Context, err error, now time.Time) {
	ns := now.UnixNano()
	last := l.lastLog.Load()
	if ns-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, ns) {
		l.suppressed.Add(1)
		return
	}
	l.logger.WarnContext(ctx, "floodgate: store failed; decided by failure policy",
		"limiter", l.name, "policy", l.policy.String(), "err", err,
		"suppressed", l.suppressed.Swap(0))
}

// SplitLeases returns two views of l (see Only), sharing its state: one
// with l's Concurrency rules, one with the others, either nil when l has
// none. Work whose usage is known only when it ends holds a lease of the
// first for its whole duration (Allow, then Refund of the LeaseTicket) and
// records its usage into the second: an in-flight cap and a usage limit
// (tokens per minute) on one route. Recording into l itself would add a
// lease that is never released.
func (l *Limiter) SplitLeases() (leases, rest *Limiter, err error) {
	var ln, rn []string
	for _, c := range l.rules {
		if c.Algorithm == Concurrency {
			ln = append(ln, c.Name)
		} else {
			rn = append(rn, c.Name)
		}
	}
	if len(ln) > 0 {
		if leases, err = l.Only(ln...); err != nil {
			return nil, nil, err
		}
	}
	if len(rn) > 0 {
		if rest, err = l.Only(rn...); err != nil {
			return nil, nil, err
		}
	}
	return leases, rest, nil
}
