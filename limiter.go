package floodgate

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"

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
	// RequireKeys makes a request without the key of one of the keyed
	// rules (an attribute missing or empty, a KeyFunc returning "") a
	// denial with ReasonInvalid and a *KeyError, charged to no rule,
	// instead of skipping the rule: for limiters whose every request must
	// carry every key, such as middleware that must run after
	// authentication. Without it the rule is skipped, and an Observer sees
	// it missing from the Event's rules.
	RequireKeys bool
	// Observer, when set, is told of every decision (consume, peek and
	// record), for metrics, top keys and audit. Refunds and resets are not
	// decisions and are not told.
	Observer Observer
	// ObserveSample, above 1, tells the Observer of a random 1 in
	// ObserveSample of the admitted decisions, and of every other one
	// (denied, shadow-denied or failed); each event's Weight is how many
	// decisions it stands for. Sampling spares most admitted decisions
	// (the common case) what an event costs. 0 or 1 tells the Observer of
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
	name       string
	store      store.Store
	rules      []*compiledRule
	byName     map[string]*compiledRule
	leases     bool // a rule is Concurrency: consumes need a lease id
	reservable bool // a rule is Reservable
	// bound decides on the rules by value when the store binds them
	// (store.Binder); nil for other stores, which are sent Batches. one
	// is the limiter's rule when it has one whose limits no request
	// changes, bound: its decisions take decideOne.
	bound store.Bound
	one   *compiledRule
	// keyAttr is the one attribute every keyed rule keys on ("" when no
	// rule has a key); byKey says there is at most one, so that AllowKey
	// can decide; dynamic says a rule has overrides or a LimitFunc, which
	// read the request's Attributes.
	keyAttr string
	byKey   bool
	dynamic bool

	clock       Clock
	policy      FailurePolicy
	shadow      bool
	requireKeys bool
	observer    Observer
	sample      uint32 // ObserveSample; 0 or 1: every decision
	logger      *slog.Logger
	opts        Options // as given to New, for views made with Only

	held       *nameHold // the limiter's hold on its name (names.go)
	batches    sync.Pool // of *store.Batch: a Batch crosses the Store interface, so it lives on the heap
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
	if opts.ObserveSample < 0 || opts.ObserveSample > maxObserveSample {
		return nil, limiterError(name, "observe_sample", "must be between 0 and "+strconv.Itoa(maxObserveSample))
	}
	l := &Limiter{
		name:        name,
		store:       st,
		byName:      make(map[string]*compiledRule, len(rules)),
		clock:       opts.Clock,
		policy:      opts.FailurePolicy,
		shadow:      opts.Shadow,
		requireKeys: opts.RequireKeys,
		observer:    opts.Observer,
		sample:      uint32(opts.ObserveSample),
		logger:      opts.Logger,
		opts:        *opts,
	}
	l.opts.Replaces = nil // a view (Only) must not keep the replaced limiter alive
	if l.clock == nil {
		l.clock = defaultClock
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	for i, r := range rules {
		c, err := compileRule(name, i, r)
		if err != nil {
			return nil, err
		}
		if _, dup := l.byName[r.Name]; dup {
			return nil, &ConfigError{Limiter: name, Rule: r.Name, RuleIndex: i, Field: "name", Reason: "duplicate rule name"}
		}
		c.index, c.shadow = i, c.Shadow || l.shadow
		l.byName[r.Name] = c
		l.rules = append(l.rules, c)
		l.leases = l.leases || r.Algorithm == Concurrency
		l.reservable = l.reservable || r.Reservable
		l.dynamic = l.dynamic || r.Overrides != nil || r.LimitFunc != nil
	}
	l.keyAttr, l.byKey = keyAttr(l.rules)
	if b, ok := st.(store.Binder); ok {
		l.bound = b.Bind(l.boundRules())
		if len(l.rules) == 1 && !l.dynamic {
			l.one = l.rules[0]
		}
	}
	if err := l.hold(opts.Replaces); err != nil {
		return nil, err
	}
	l.batches.New = func() any { return &store.Batch{Ops: make([]store.Op, 0, len(rules))} }
	return l, nil
}

// boundRules are l's rules as a store binds them.
func (l *Limiter) boundRules() []store.BoundRule {
	out := make([]store.BoundRule, len(l.rules))
	for i, r := range l.rules {
		out[i] = store.BoundRule{Scope: r.scope, Params: r.params, Shadow: r.shadow}
	}
	return out
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

// Allow asks for one unit: shorthand for AllowN(ctx, attrs, 1).
func (l *Limiter) Allow(ctx context.Context, attrs Attributes) Decision {
	if l.one != nil {
		return l.decideOne(ctx, ModeConsume, 1, attrs, "", nil)
	}
	return l.decideRules(ctx, ModeConsume, 1, attrs, "", nil, nil)
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
	return l.decide(ctx, mode, n, attrs, "", nil, nil), nil
}

// AllowKey asks for one unit for key: the call for a limiter whose rules
// key on one attribute, a user id or a client IP, as Allow(ctx,
// Attributes{name: key}) with that attribute's name, without building the
// map. Rules without key attributes apply as always. On a limiter whose
// rules key on several attributes or on a KeyFunc, the key's attribute is
// unknown: the decision is denied with ReasonInvalid and ErrNotOneKey.
func (l *Limiter) AllowKey(ctx context.Context, key string) Decision {
	switch {
	case !l.byKey:
		return Decision{Reason: ReasonInvalid, Err: ErrNotOneKey}
	case l.one != nil:
		return l.decideOne(ctx, ModeConsume, 1, nil, single(key), nil)
	case l.dynamic: // overrides and limit functions read the attributes
		return l.decideRules(ctx, ModeConsume, 1, Attributes{l.keyAttr: key}, "", nil, nil)
	}
	return l.decideRules(ctx, ModeConsume, 1, nil, single(key), nil, nil)
}

// keyAttr returns the one attribute name the keyed rules key on ("" when
// none has a key), and whether there is at most one (not several,
// composite keys or a KeyFunc).
func keyAttr(rules []*compiledRule) (attr string, one bool) {
	for _, r := range rules {
		if r.KeyFunc != nil || len(r.Key) > 1 || len(r.Key) == 1 && attr != "" && r.Key[0] != attr {
			return "", false
		}
		if len(r.Key) == 1 {
			attr = r.Key[0]
		}
	}
	return attr, true
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
	l.decide(ctx, mode, n, attrs, "", nil, &o)
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
	if !t.Until.IsZero() {
		return l.Release(ctx, t) // a reservation's
	}
	sh := sheet{call: store.Call{Mode: store.Refund, Cost: t.Cost, Ticket: t.ID, Now: l.clock.Now().UnixMicro()}}
	for _, e := range t.Entries {
		r := l.byName[e.Rule]
		if r == nil {
			continue // the rule was removed since: nothing to give back
		}
		p := r.refundParams(e)
		limit, burst := r.overrides(&p)
		sh.add(r, e.Key, limit, burst, false, e.Stamp)
	}
	if sh.n == 0 {
		return nil
	}
	if err := l.exec(ctx, &sh); err != nil {
		l.logger.WarnContext(ctx, "floodgate: refund not applied", "limiter", l.name, "err", err)
		return err
	}
	return nil
}

// Reset forgets the state of every rule's key for attrs (an admin action).
func (l *Limiter) Reset(ctx context.Context, attrs Attributes) error {
	sh := sheet{call: store.Call{Mode: store.Reset, Now: l.clock.Now().UnixMicro()}}
	for _, r := range l.rules {
		if key := r.keyFor(attrs); key != "" {
			sh.add(r, key, 0, 0, false, 0)
		}
	}
	if sh.n == 0 {
		return nil
	}
	return l.exec(ctx, &sh)
}

// ruleDecisions is what each rule of sh decided, given the decision d.
// When the store did not answer, each rule carries the decision's verdict.
func ruleDecisions(sh *sheet, d Decision, answered bool) []RuleDecision {
	if sh.n == 0 {
		return nil
	}
	out := make([]RuleDecision, sh.n)
	for i := range out {
		r, key, _, _, held, _ := sh.op(i)
		limit, burst := sh.limits(i)
		rd := &out[i]
		rd.Name, rd.Key, rd.Shadow, rd.Limit, rd.algorithm = r.Name, key, r.shadow, limit, r.Algorithm
		rd.Capacity = limit
		if r.Algorithm == TokenBucket || r.Algorithm == GCRA { // compiling sets Burst for these
			rd.Capacity = burst
		}
		if !answered {
			rd.Allowed = d.Allowed
			continue
		}
		res, stamp := sh.answer(i)
		rd.Allowed, rd.Never = res.Allowed, res.Never
		rd.Remaining, rd.ResetAfter, rd.RetryAfter = res.Remaining, res.ResetAfter, res.RetryAfter
		rd.stamp, rd.held = *stamp, held
		rd.took = sh.call.Mode == ModeConsume && sh.ans.Allowed && res.Allowed
	}
	return out
}
