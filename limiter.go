package floodgate

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"strconv"
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

// DefaultTimeout is the default deadline of one store call: about five
// times the p99 of a Redis decision under load on a busy 2-CPU machine
// (18.8 ms at 9,500 decisions/s, 64 callers), and above the stalls such a
// machine has without a fault (a 50 ms deadline timed out 132 of 2.3
// million calls in 4 minutes) and a short Redis stall (86 ms), which then
// make decisions wait rather than be decided by policy. See "Choosing the
// deadline" in docs/operations.md.
const DefaultTimeout = 100 * time.Millisecond

// Options are a limiter's optional settings. The zero value is ready to use.
type Options struct {
	// Clock supplies the time of decisions; nil means the wall clock, read
	// as the runtime's monotonic clock plus an offset re-read from the wall
	// clock once a second (so a step of the system clock is seen up to a
	// second late). SystemClock reads time.Now every time.
	Clock Clock
	// FailurePolicy decides when the store cannot answer; default FailOpen.
	FailurePolicy FailurePolicy
	// Shadow runs the whole limiter dark: every rule is a shadow rule.
	Shadow bool
	// Timeout is the deadline of each store call; 0 means DefaultTimeout.
	// In-process stores are not given one.
	Timeout time.Duration
	// Breaker tunes the circuit breaker around remote stores.
	Breaker store.BreakerOptions
	// Fallback, when set, decides in place of the failure policy whenever
	// the store cannot answer (a failed call, or the breaker open): the
	// decision is applied to Fallback instead, typically a memory store
	// holding each instance's share of the limits (see store/share). The
	// limiter's breaker alone decides when the store is back. What the
	// fallback charged is then handed back: recorded into the store's
	// current windows (what is still within its rule's window), so that
	// the window in which the store returns is not spent twice. The
	// handback remembers up to 100,000 keys.
	Fallback store.Store
	// Observer, when set, is called after every decision (consume, peek
	// and record), for metrics and audit. Refunds and resets are not
	// decisions and are not observed. An Event costs an allocation (its
	// per-rule results are the observer's to keep).
	Observer Observer
	// RuleObserver, when set, is called after every decision the Observer
	// would be told of, once for each rule that took part in it, with a
	// RuleEvent by value: what a per-key count (topkeys) needs, at no
	// allocation.
	RuleObserver RuleObserver
	// ObserveSample, above 1, tells the observers of a random 1 in
	// ObserveSample of the admitted decisions, and of every other one
	// (denied, shadow-denied or failed); each event's Weight is how many
	// decisions it stands for. Sampling spares most admitted decisions
	// (the common case) what an event costs. 0 or 1 tells the observers of
	// every decision.
	ObserveSample int
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

// Limiter applies a set of rules to requests. It is safe for concurrent use.
type Limiter struct {
	name     string
	store    store.Store
	fallback store.Store
	handback *handback // what the fallback charged (handback.go); nil without one
	rules    []*compiledRule
	byName   map[string]*compiledRule
	leases   bool // a rule is Concurrency: consumes need a lease id
	// keyAttr is the one attribute every keyed rule keys on ("" when no
	// rule has a key); oneKey says there is at most one, so AllowKey can
	// decide; plain says no rule has overrides or a LimitFunc, so AllowKey
	// needs no Attributes at all.
	keyAttr      string
	oneKey       bool
	plain        bool
	clock        Clock
	policy       FailurePolicy
	shadow       bool
	timeout      time.Duration
	remote       bool
	local        store.Local // answers some batches in-process first (store/grant)
	breaker      *breaker
	observer     Observer
	ruleObserver RuleObserver
	sample       uint32 // ObserveSample; 0 or 1: every decision
	logger       *slog.Logger
	opts         Options // as given to New, for views made with Only

	// bound, when the store is in process (a store.Binder) and there are
	// at most store.MaxBound rules, decides consumes, peeks and records
	// without a Batch (bound.go); refunds, resets and other stores take
	// the Batch path.
	bound store.Bound
	// lean says a consume of one unit is decided by allowOne: one bound
	// rule without overrides or a LimitFunc, no Concurrency lease, no
	// Observer (a RuleObserver is told by tellRule).
	lean bool

	held       *nameHold // the limiter's hold on its name (names.go)
	calls      sync.Pool // of *call: a Batch crosses the Store interface, so it lives on the heap
	lastLog    atomic.Int64
	suppressed atomic.Int64
}

// call is one store call in the making: the batch and, for each of its ops,
// the rule it came from.
type call struct {
	b     store.Batch
	rules []*compiledRule
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
	if err := opts.Breaker.Check(); err != nil {
		fe := err.(*store.FieldError)
		return nil, limiterError(name, fe.Field, fe.Reason)
	}
	if opts.ObserveSample < 0 || opts.ObserveSample > maxObserveSample {
		return nil, limiterError(name, "observe_sample", "must be between 0 and "+strconv.Itoa(maxObserveSample))
	}
	l := &Limiter{
		name:         name,
		store:        st,
		byName:       make(map[string]*compiledRule, len(rules)),
		clock:        opts.Clock,
		policy:       opts.FailurePolicy,
		shadow:       opts.Shadow,
		timeout:      opts.Timeout,
		breaker:      newBreaker(opts.Breaker),
		fallback:     opts.Fallback,
		observer:     opts.Observer,
		ruleObserver: opts.RuleObserver,
		sample:       uint32(opts.ObserveSample),
		logger:       opts.Logger,
		opts:         *opts,
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
	l.local, _ = st.(store.Local)
	if l.remote && l.fallback != nil {
		l.handback = &handback{}
	}
	for i, r := range rules {
		c, err := compileRule(name, i, r)
		if err != nil {
			return nil, err
		}
		if _, dup := l.byName[r.Name]; dup {
			return nil, &ConfigError{Limiter: name, Rule: r.Name, RuleIndex: i, Field: "name", Reason: "duplicate rule name"}
		}
		c.shadow = c.Shadow || l.shadow
		l.byName[r.Name] = c
		l.rules = append(l.rules, c)
		l.leases = l.leases || r.Algorithm == Concurrency
	}
	l.keyAttr, l.oneKey, l.plain = oneKey(l.rules)
	if b, ok := st.(store.Binder); ok && len(l.rules) <= store.MaxBound {
		l.bound = b.Bind(l.boundRules())
	}
	l.lean = l.bound != nil && len(l.rules) == 1 && l.plain && !l.leases && l.observer == nil
	if err := l.hold(opts.Replaces); err != nil {
		return nil, err
	}
	n := len(rules)
	l.calls.New = func() any {
		return &call{b: store.Batch{Ops: make([]store.Op, 0, n)}, rules: make([]*compiledRule, 0, n)}
	}
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
func (l *Limiter) Breaker() store.BreakerState { return l.breaker.State() }

// Allow asks for one unit: shorthand for AllowN(ctx, attrs, 1).
func (l *Limiter) Allow(ctx context.Context, attrs Attributes) Decision {
	if l.lean {
		return l.allowOne(ctx, l.rules[0].keyFor(attrs))
	}
	return l.decide(ctx, ModeConsume, attrs, 1, nil)
}

// AllowN asks for n units. Every applicable rule must admit n for the
// decision to be admitted, and then n is charged to every one of them; a
// denied decision charges nothing. n == 0 peeks: nothing is charged and
// Allowed says whether one unit would be admitted now.
func (l *Limiter) AllowN(ctx context.Context, attrs Attributes, n int64) (Decision, error) {
	return l.decideN(ctx, ModeConsume, attrs, n)
}

// Peek reports whether n units would be admitted now, charging nothing.
func (l *Limiter) Peek(ctx context.Context, attrs Attributes, n int64) (Decision, error) {
	return l.decideN(ctx, ModePeek, attrs, n)
}

// Record charges n units to every applicable rule without an admission
// check: usage known only after the work is done. It may push keys past
// their limits; later decisions are then denied until the usage ages out.
// The decision describes the state afterwards, as a peek at one unit.
func (l *Limiter) Record(ctx context.Context, attrs Attributes, n int64) (Decision, error) {
	return l.decideN(ctx, ModeRecord, attrs, n)
}

// decideN is AllowN, Peek and Record: n checked for mode, then decided.
func (l *Limiter) decideN(ctx context.Context, mode Mode, attrs Attributes, n int64) (Decision, error) {
	mode, n, err := l.check(mode, n)
	if err != nil {
		return Decision{}, err
	}
	return l.decide(ctx, mode, attrs, n, nil), nil
}

// AllowKey asks for one unit for key: the call for a limiter whose rules
// key on one attribute, a user id or a client IP, as Allow(ctx,
// Attributes{name: key}) with that attribute's name, without building the
// map. Rules without key attributes apply as always. On a limiter whose
// rules key on several attributes or on a KeyFunc, the key's attribute is
// unknown: the decision is then the failure policy's, with Err saying so.
func (l *Limiter) AllowKey(ctx context.Context, key string) Decision {
	if !l.oneKey {
		c := l.call(ModeConsume, 1)
		return l.run(ctx, c, sprintfErr("floodgate: limiter %q: AllowKey needs rules keyed on one attribute at most", l.name), nil)
	}
	if !l.plain {
		return l.decide(ctx, ModeConsume, Attributes{l.keyAttr: key}, 1, nil)
	}
	key = single(key)
	if l.bound != nil && len(l.rules) == 1 {
		if len(l.rules[0].Key) == 0 {
			key = globalKey
		}
		if !l.lean || key == "" {
			return l.decideOne(ctx, ModeConsume, 1, key, 0, 0, nil, nil)
		}
		// allowOne, written out: one call shorter (BenchmarkCompare).
		r := l.rules[0]
		now := l.clock.Now()
		res, _, admitted := l.bound.One(ModeConsume, now.UnixMicro(), 1, 0, key, 0, 0)
		if l.ruleObserver == nil {
			return ruleVerdict(r, ModeConsume, admitted, &res, r.params.Limit)
		}
		d := ruleVerdict(r, ModeConsume, admitted, &res, r.params.Limit)
		l.tellRule(ctx, d.Allowed && !d.ShadowDenied, ModeConsume, key, now, !res.Allowed)
		return d
	}
	if l.bound != nil {
		var c store.Call
		for i, r := range l.rules {
			switch {
			case len(r.Key) == 0:
				c.Keys[i] = globalKey
			case key != "":
				c.Keys[i] = key
			}
		}
		return l.decideBound(ctx, ModeConsume, 1, &c, nil, nil)
	}
	c := l.call(ModeConsume, 1)
	for _, r := range l.rules {
		switch {
		case len(r.Key) == 0:
			c.add(r, globalKey)
		case key != "":
			c.add(r, key)
		}
	}
	return l.run(ctx, c, nil, nil)
}

// oneKey returns the one attribute name the keyed rules key on ("" when
// none has a key), whether there is at most one (not several, composite
// keys or a KeyFunc), and whether AllowKey can decide without attributes
// (no rule needs them for anything else).
func oneKey(rules []*compiledRule) (attr string, one, plain bool) {
	plain = true
	for _, r := range rules {
		if r.KeyFunc != nil || len(r.Key) > 1 || len(r.Key) == 1 && attr != "" && r.Key[0] != attr {
			return "", false, false
		}
		if len(r.Key) == 1 {
			attr = r.Key[0]
		}
		plain = plain && r.Overrides == nil && r.LimitFunc == nil
	}
	return attr, true, plain
}

// Decide makes the decision that AllowN (ModeConsume), Peek (ModePeek) or
// Record (ModeRecord) makes, and returns it in full: what each rule
// decided, and the ticket that refunds an admitted consume.
func (l *Limiter) Decide(ctx context.Context, mode Mode, attrs Attributes, n int64) (Outcome, error) {
	mode, n, err := l.check(mode, n)
	if err != nil {
		return Outcome{}, err
	}
	var o Outcome
	l.decide(ctx, mode, attrs, n, &o)
	return o, nil
}

// check validates a decision's mode and cost: a consume of 0 is a peek of 1.
func (l *Limiter) check(mode Mode, n int64) (Mode, int64, error) {
	switch {
	case mode != ModeConsume && mode != ModePeek && mode != ModeRecord:
		return mode, n, sprintfErr("floodgate: limiter %q: %s is not a decision", l.name, mode)
	case mode == ModeConsume && n < 0:
		return mode, n, sprintfErr("floodgate: limiter %q: cost %d must not be negative", l.name, n)
	case mode == ModeRecord && n < 0:
		return mode, n, sprintfErr("floodgate: limiter %q: recorded cost %d must not be negative", l.name, n)
	case mode == ModePeek && n < 1:
		return mode, n, sprintfErr("floodgate: limiter %q: peek cost %d must be at least 1", l.name, n)
	case mode == ModeConsume && n == 0:
		return ModePeek, 1, nil
	}
	return mode, n, nil
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
	c := l.call(store.Refund, t.Cost)
	defer l.calls.Put(c)
	c.b.Ticket = t.ID
	for _, e := range t.Entries {
		r := l.byName[e.Rule]
		if r == nil {
			continue // the rule was removed since: nothing to give back
		}
		c.b.Ops = append(c.b.Ops, store.Op{Scope: r.scope, Key: e.Key, Params: r.refundParams(e), Stamp: e.Stamp})
	}
	if len(c.b.Ops) == 0 {
		return nil
	}
	if err := l.apply(ctx, &c.b); err != nil {
		l.logger.WarnContext(ctx, "floodgate: refund not applied", "limiter", l.name, "err", err)
		return err
	}
	return nil
}

// Reset forgets the state of every rule's key for attrs (an admin action).
func (l *Limiter) Reset(ctx context.Context, attrs Attributes) error {
	c := l.call(store.Reset, 0)
	defer l.calls.Put(c)
	for _, r := range l.rules {
		if key := r.keyFor(attrs); key != "" {
			c.b.Ops = append(c.b.Ops, store.Op{Scope: r.scope, Key: key, Params: r.params})
		}
	}
	if len(c.b.Ops) == 0 {
		return nil
	}
	return l.apply(ctx, &c.b)
}

// call returns an empty call of the given mode and cost, at the limiter's
// clock reading.
func (l *Limiter) call(mode store.Mode, cost int64) *call {
	c := l.calls.Get().(*call)
	c.b = store.Batch{Mode: mode, Now: l.clock.Now(), Cost: cost, Ops: c.b.Ops[:0]}
	c.rules = c.rules[:0]
	return c
}

// decide makes one decision for attrs. o, when not nil, receives it in
// full.
func (l *Limiter) decide(ctx context.Context, mode Mode, attrs Attributes, cost int64, o *Outcome) Decision {
	if l.bound != nil && len(l.rules) == 1 {
		key, limit, burst, err := l.bindOne(ctx, attrs)
		return l.decideOne(ctx, mode, cost, key, limit, burst, err, o)
	}
	if l.bound != nil {
		var c store.Call
		err := l.bindCall(ctx, &c, attrs)
		return l.decideBound(ctx, mode, cost, &c, err, o)
	}
	c := l.call(mode, cost)
	err := l.build(ctx, c, attrs)
	return l.run(ctx, c, err, o)
}

// run applies c, the batch of the rules that apply to a request (or the
// error that stopped building it), to the store (or, when the store cannot
// answer, to the fallback or the failure policy) and reads the decision off
// the results. The per-rule results are built only for o or an observed
// decision.
func (l *Limiter) run(ctx context.Context, c *call, err error, o *Outcome) Decision {
	b := &c.b
	if err == nil && len(b.Ops) > 0 {
		if b.Mode != ModePeek && (o != nil || l.leases) {
			b.Ticket = rand.Uint64() | 1 // the lease id, and the ticket's
		}
		if err = l.apply(ctx, b); err != nil && l.fallback != nil {
			// One line for the decision: the fallback's, or (both failing)
			// the failure policy's, naming both errors.
			if ferr := l.fallback.Apply(ctx, b); ferr != nil {
				err = errors.Join(err, ferr)
			} else {
				l.logFailure(ctx, "floodgate: store failed; decided on the fallback store", err, b.Now)
				l.handback.note(b)
				err = nil
			}
		}
	}
	var buf [maxInline]applied
	sh := sheet{mode: b.Mode, cost: b.Cost, ticket: b.Ticket, admitted: b.Allowed, rules: buf[:0]}
	if len(b.Ops) > maxInline {
		sh.rules = make([]applied, 0, len(b.Ops))
	}
	for i := range b.Ops {
		op := &b.Ops[i]
		sh.rules = append(sh.rules, applied{rule: c.rules[i], key: op.Key, limit: op.Params.Limit, burst: op.Params.Burst, stamp: op.Stamp, res: op.Result})
	}
	now := b.Now
	l.calls.Put(c)
	return l.conclude(ctx, &sh, now, err, o)
}

// maxInline is how many rules a decision on the Batch path reads back
// without allocating.
const maxInline = 8

// sheet is one decision's applied rules and their answers, whichever path
// decided it: what the Decision, the Outcome and the Event are read from.
// (The decision's time is passed beside it: a time.Time holds a pointer,
// and the Event handed to the observer would take the sheet, and the
// caller's array of its rules, to the heap with it.)
type sheet struct {
	mode     Mode
	cost     int64
	ticket   uint64
	admitted bool // a consume was admitted and charged
	rules    []applied
}

// applied is one applied rule of a decision, its key and limits, and its
// answer.
type applied struct {
	rule         *compiledRule
	key          string
	limit, burst int64
	stamp        int64
	res          store.Result
}

// conclude reads the decision made at now off sh (or, when err is not nil,
// makes the failure policy's), tells the observer of it and fills o when
// asked.
func (l *Limiter) conclude(ctx context.Context, sh *sheet, now time.Time, err error, o *Outcome) Decision {
	var d Decision
	switch {
	case err != nil:
		d = l.failed(ctx, now, sh, err)
	case len(sh.rules) == 0:
		d.Allowed = true // no rule applies to this request
	default:
		d = verdict(sh)
	}
	w := l.weight(&d)
	if o == nil && w == 0 {
		return d
	}
	return l.report(ctx, sh, now, d, err == nil, w, o)
}

// build adds an op to c for every rule that applies to attrs.
func (l *Limiter) build(ctx context.Context, c *call, attrs Attributes) error {
	for _, r := range l.rules {
		key := r.keyFor(attrs)
		if key == "" {
			continue
		}
		op := c.add(r, key)
		if r.Overrides != nil || r.LimitFunc != nil {
			var err error
			if op.Params, err = r.paramsFor(ctx, attrs); err != nil {
				c.b.Ops, c.rules = c.b.Ops[:len(c.b.Ops)-1], c.rules[:len(c.rules)-1]
				return err
			}
		}
	}
	return nil
}

// add appends the op of rule r for key, with the rule's parameters, and
// returns it. The op is filled in place: building it aside and appending
// would copy its 150 bytes once more.
func (c *call) add(r *compiledRule, key string) *store.Op {
	c.b.Ops = append(c.b.Ops, store.Op{})
	op := &c.b.Ops[len(c.b.Ops)-1]
	op.Scope, op.Key, op.Params, op.Shadow, op.Grant = r.scope, key, r.params, r.shadow, r.Grant
	c.rules = append(c.rules, r)
	return op
}

// apply runs b against the store, with the deadline and the breaker for
// remote stores.
func (l *Limiter) apply(ctx context.Context, b *store.Batch) error {
	if !l.remote {
		return l.store.Apply(ctx, b)
	}
	if l.local != nil && l.local.ApplyLocal(b) {
		return nil
	}
	if !l.breaker.Allow(b.Now.UnixNano()) {
		return store.ErrBreakerOpen
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
	if l.handback != nil && l.handback.pending.Load() {
		l.handBack()
	}
	return nil
}

// verdict reads the decision off the store's answers in sh.
func verdict(sh *sheet) Decision {
	rs := sh.rules
	if len(rs) == 1 {
		return ruleVerdict(rs[0].rule, sh.mode, sh.admitted, &rs[0].res, rs[0].limit)
	}
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

// ruleVerdict is verdict for a decision of mode on one rule r, whose answer
// is res under limit (admitted: a consume was admitted and charged), with
// none of the choices among rules: the commonest decision, kept short
// (BenchmarkCompare).
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

// ruleDecisions is what each rule of sh decided, given the decision d.
// When the store did not answer, each rule carries the decision's verdict.
func ruleDecisions(sh *sheet, d Decision, answered bool) []RuleDecision {
	if len(sh.rules) == 0 {
		return nil
	}
	out := make([]RuleDecision, len(sh.rules))
	for i := range sh.rules {
		a, r := &sh.rules[i], sh.rules[i].rule
		rd := &out[i]
		rd.Name, rd.Key, rd.Shadow, rd.Limit, rd.algorithm = r.Name, a.key, r.shadow, a.limit, r.Algorithm
		rd.Capacity = a.limit
		if r.Algorithm == TokenBucket || r.Algorithm == GCRA { // compiling sets Burst for these
			rd.Capacity = a.burst
		}
		if !answered {
			rd.Allowed = d.Allowed
			continue
		}
		res := &a.res
		rd.Allowed, rd.Never = res.Allowed, res.Never
		rd.Remaining, rd.ResetAfter, rd.RetryAfter = res.Remaining, res.ResetAfter, res.RetryAfter
		rd.stamp = a.stamp
		rd.took = sh.mode == ModeConsume && sh.admitted && res.Allowed
	}
	return out
}

// failed is the failure policy's decision for a store error.
func (l *Limiter) failed(ctx context.Context, now time.Time, sh *sheet, err error) Decision {
	d := Decision{Reason: ReasonStore, Err: err}
	// A shadow limiter never denies, not even when its store fails.
	d.Allowed = l.policy == FailOpen || l.shadow
	if !d.Allowed {
		d.RetryAfter = max(l.breaker.RetryIn(now.UnixNano()), time.Second)
	}
	if len(sh.rules) > 0 {
		d.Rule, d.Limit = sh.rules[0].rule.Name, sh.rules[0].limit
	}
	l.logFailure(ctx, "floodgate: store failed; decided by failure policy", err, now)
	return d
}

// logFailure logs at most one failure-policy line a second, with the count
// of the ones it held back.
func (l *Limiter) logFailure(ctx context.Context, msg string, err error, now time.Time) {
	ns := now.UnixNano()
	last := l.lastLog.Load()
	if ns-last < int64(time.Second) || !l.lastLog.CompareAndSwap(last, ns) {
		l.suppressed.Add(1)
		return
	}
	l.logger.WarnContext(ctx, msg,
		"limiter", l.name, "policy", l.policy.String(), "err", err,
		"suppressed", l.suppressed.Swap(0))
}

// SplitLeases returns two views of l (see Only), sharing its state: one
// with l's Concurrency rules, one with the others, either nil when l has
// none. Work whose usage is known only when it ends holds a lease of the
// first for its whole duration (Decide, then Refund of its Outcome's
// LeaseTicket) and
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
