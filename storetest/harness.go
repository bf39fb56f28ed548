package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
)

// harness drives one limiter over a store and the model side by side, and
// fails the test at the first answer on which they differ.
type harness struct {
	t     *testing.T
	ctx   context.Context
	seed  uint64
	rng   *rand.Rand
	clock *clocktest.Manual
	lim   *floodgate.Limiter
	model *model
	specs []ruleSpec
	attrs []string   // rule i's key attribute; "" is the rule's global key
	lims  []limits   // rule i's limits now, read by its LimitFunc
	alts  [][]limits // the limits rule i may switch between
	pro   []bool     // rule i has an override for plan "pro" (alts[1])

	tickets      []heldTicket
	reservations []heldReservation
	trace        []string
}

// heldTicket pairs a store's ticket with the model's.
type heldTicket struct {
	real  floodgate.Ticket
	model int
}

// heldReservation is a reservation's ticket, the store's and the model's,
// and when it was first settled (-1: not yet).
type heldReservation struct {
	real    floodgate.Ticket
	model   int
	settled int64
}

// harnessRule is one rule of a harness: its fixed shape and the limits it
// may take (the first applies at construction).
type harnessRule struct {
	spec ruleSpec
	attr string
	alts []limits
	// burst is the rule's configured Burst (0: follows the limit).
	burst int64
	// dynamic makes the rule take its limit from a LimitFunc, or with
	// override set, from an Override for requests of plan "pro".
	dynamic, override bool
	// overrideBurst is the Override's Burst.
	overrideBurst int64
}

// newHarness builds a limiter named name over store with the given rules.
func newHarness(t *testing.T, store *sharedStore, name string, seed uint64, start time.Time, rules []harnessRule, shadowLimiter bool) *harness {
	t.Helper()
	h := &harness{
		t:     t,
		ctx:   context.Background(),
		seed:  seed,
		rng:   rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		clock: store.clockAt(start),
	}
	var rs []floodgate.Rule
	for i, hr := range rules {
		spec := hr.spec
		if shadowLimiter {
			spec.shadow = true
		}
		h.specs = append(h.specs, spec)
		h.attrs = append(h.attrs, hr.attr)
		h.lims = append(h.lims, hr.alts[0])
		h.alts = append(h.alts, hr.alts)
		r := floodgate.Rule{
			Name:       spec.name,
			Algorithm:  spec.alg,
			Limit:      hr.alts[0].limit,
			Window:     time.Duration(spec.window) * time.Microsecond,
			Burst:      hr.burst,
			Buckets:    spec.buckets,
			Align:      spec.align,
			Location:   spec.loc,
			Shadow:     hr.spec.shadow,
			Reservable: spec.holds,
		}
		if spec.align == floodgate.AlignDay || spec.align == floodgate.AlignMonth {
			r.Window = 0 // calendar windows ignore it
		}
		if hr.attr != "" {
			r.Key = []string{hr.attr}
		}
		switch {
		case hr.dynamic && hr.override:
			r.Overrides = []floodgate.Override{{Match: floodgate.Attributes{"plan": "pro"}, Limit: hr.alts[1].limit, Burst: hr.overrideBurst}}
		case hr.dynamic:
			r.LimitFunc = func(context.Context, floodgate.Attributes) (int64, error) {
				return h.lims[i].limit, nil
			}
		}
		h.pro = append(h.pro, hr.dynamic && hr.override)
		rs = append(rs, r)
	}
	lim, err := floodgate.New(name, store.Store, rs, &floodgate.Options{Clock: h.clock, Shadow: shadowLimiter})
	if err != nil {
		t.Fatalf("seed %d: floodgate.New: %v", seed, err)
	}
	h.lim = lim
	// The sliding window's default bucket count is the engine's choice.
	for i, r := range lim.Rules() {
		if h.specs[i].alg == floodgate.SlidingWindow {
			h.specs[i].buckets = r.Buckets
		}
	}
	h.model = newModel(h.specs)
	return h
}

// now is the clock in µs.
func (h *harness) now() int64 { return h.clock.Now().UnixMicro() }

func (h *harness) logf(format string, args ...any) {
	h.trace = append(h.trace, fmt.Sprintf("t=%d ", h.now())+fmt.Sprintf(format, args...))
}

// fail reports a difference from the model with the seed that reproduces it
// and the operations that led there.
func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	from := max(0, len(h.trace)-60)
	var rules []string
	for i, s := range h.specs {
		rules = append(rules, fmt.Sprintf("%s: %s window=%dµs buckets=%d align=%s loc=%v shadow=%v key=%q limits=%+v",
			s.name, s.alg, s.window, s.buckets, s.align, s.loc, s.shadow, h.attrs[i], h.alts[i]))
	}
	h.t.Fatalf("%s\nseed %d (rerun with %s=%d)\nrules:\n  %s\nlast operations:\n  %s",
		fmt.Sprintf(format, args...), h.seed, SeedEnv, h.seed, strings.Join(rules, "\n  "), strings.Join(h.trace[from:], "\n  "))
}

// request returns attributes for a random request and each rule's model key
// ("" when the rule is skipped). Each key attribute is absent with
// probability absent percent; half the requests are of plan "pro".
func (h *harness) request(absent int) (floodgate.Attributes, []string) {
	attrs := floodgate.Attributes{}
	for _, a := range []string{"k", "u"} {
		if h.rng.IntN(100) >= absent {
			attrs[a] = []string{"x", "y", "z"}[h.rng.IntN(3)]
		}
	}
	if h.rng.IntN(2) == 0 {
		attrs["plan"] = "pro"
	}
	keys := make([]string, len(h.specs))
	for i, a := range h.attrs {
		switch {
		case a == "":
			keys[i] = "*"
		default:
			keys[i] = attrs[a]
		}
	}
	return attrs, keys
}

// limitsFor is each rule's limits for a request.
func (h *harness) limitsFor(attrs floodgate.Attributes) []limits {
	out := append([]limits(nil), h.lims...)
	for i, pro := range h.pro {
		if pro && attrs["plan"] == "pro" {
			out[i] = h.alts[i][1]
		} else if pro {
			out[i] = h.alts[i][0]
		}
	}
	return out
}

// consume asks for n units and compares the answer; it returns the decision.
// Half the time it asks as most callers do, with AllowN, whose lean decision
// has no per-rule results and no ticket (or, for one unit of a limiter
// keyed on one attribute, a third of the time with AllowKey); else with
// Decide, in full.
func (h *harness) consume(attrs floodgate.Attributes, keys []string, n int64) floodgate.Outcome {
	h.t.Helper()
	h.logf("consume %v n=%d", attrs, n)
	if key, ok := h.soleKey(attrs); ok && n == 1 && h.rng.IntN(3) == 0 {
		d := h.lim.AllowKey(h.ctx, key)
		want := h.model.decide(floodgate.ModeConsume, h.now(), keys, h.limitsFor(attrs), n)
		h.compareDecision("consume (AllowKey)", d, want)
		return floodgate.Outcome{Decision: d}
	}
	if h.rng.IntN(2) == 0 {
		d, err := h.lim.AllowN(h.ctx, attrs, n)
		if err != nil {
			h.fail("AllowN(%d): %v", n, err)
		}
		want := h.model.decide(floodgate.ModeConsume, h.now(), keys, h.limitsFor(attrs), n)
		h.compareDecision("consume (AllowN)", d, want)
		return floodgate.Outcome{Decision: d}
	}
	got, err := h.lim.Decide(h.ctx, floodgate.ModeConsume, attrs, n)
	if err != nil {
		h.fail("Decide(consume, %d): %v", n, err)
	}
	want := h.model.decide(floodgate.ModeConsume, h.now(), keys, h.limitsFor(attrs), n)
	h.logResult(got)
	h.compare("consume", got, want)
	if t := got.Ticket(); t.Valid() != (want.ticket >= 0) {
		h.fail("consume: ticket valid %v, want %v", t.Valid(), want.ticket >= 0)
	} else if t.Valid() {
		h.tickets = append(h.tickets, heldTicket{real: t, model: want.ticket})
	}
	return got
}

// soleKey returns the value of attrs' one attribute when AllowKey asks
// what Allow(attrs) asks: attrs holds that attribute alone, a rule keys on
// it, and every other rule keys on it or on nothing. (An attribute no
// rule keys on, one an override matches, is not AllowKey's to pass.)
func (h *harness) soleKey(attrs floodgate.Attributes) (string, bool) {
	if len(attrs) != 1 {
		return "", false
	}
	for name, v := range attrs {
		keyed := false
		for _, a := range h.attrs {
			if a != "" && a != name {
				return "", false
			}
			keyed = keyed || a == name
		}
		return v, keyed
	}
	return "", false
}

// peek asks whether n units would be admitted; n == 0 asks with a consume
// of 0 units, the peek at one unit.
func (h *harness) peek(attrs floodgate.Attributes, keys []string, n int64) floodgate.Outcome {
	h.t.Helper()
	h.logf("peek %v n=%d", attrs, n)
	var got floodgate.Outcome
	var err error
	if n == 0 {
		got, err = h.lim.Decide(h.ctx, floodgate.ModeConsume, attrs, 0)
		n = 1
	} else {
		got, err = h.lim.Decide(h.ctx, floodgate.ModePeek, attrs, n)
	}
	if err != nil {
		h.fail("peek: %v", err)
	}
	h.logResult(got)
	h.compare("peek", got, h.model.decide(floodgate.ModePeek, h.now(), keys, h.limitsFor(attrs), n))
	if got.Ticket().Valid() {
		h.fail("peek returned a valid ticket")
	}
	// The lean call decides the same as Decide.
	if lean, err := h.lim.Peek(h.ctx, attrs, n); err != nil || lean != got.Decision {
		h.fail("Peek = %+v, %v; Decide's decision %+v", lean, err, got.Decision)
	}
	return got
}

// record charges n units, half the time with Record (the lean decision),
// else with Decide, and compares the answer.
func (h *harness) record(attrs floodgate.Attributes, keys []string, n int64) {
	h.t.Helper()
	h.logf("record %v n=%d", attrs, n)
	if h.rng.IntN(2) == 0 {
		d, err := h.lim.Record(h.ctx, attrs, n)
		if err != nil {
			h.fail("Record(%d): %v", n, err)
		}
		h.compareDecision("record (Record)", d, h.model.decide(floodgate.ModeRecord, h.now(), keys, h.limitsFor(attrs), n))
		return
	}
	got, err := h.lim.Decide(h.ctx, floodgate.ModeRecord, attrs, n)
	if err != nil {
		h.fail("Decide(record, %d): %v", n, err)
	}
	h.logResult(got)
	h.compare("record", got, h.model.decide(floodgate.ModeRecord, h.now(), keys, h.limitsFor(attrs), n))
}

// logResult adds the store's per-rule answers to the last trace line.
func (h *harness) logResult(d floodgate.Outcome) {
	var b strings.Builder
	for _, r := range d.Rules {
		fmt.Fprintf(&b, " [%s ok=%v rem=%d reset=%v retry=%v]", r.Name, r.Allowed, r.Remaining, r.ResetAfter, r.RetryAfter)
	}
	h.trace[len(h.trace)-1] += " →" + b.String()
}

// refund refunds a random ticket handed out so far (perhaps again).
func (h *harness) refund() {
	h.t.Helper()
	if len(h.tickets) == 0 {
		return
	}
	tk := h.tickets[h.rng.IntN(len(h.tickets))]
	h.logf("refund ticket #%d (cost %d, %d rules, spent %v)", tk.model, tk.real.Cost, len(tk.real.Entries), h.model.tickets[tk.model].spent)
	real := tk.real
	if h.rng.IntN(2) == 0 {
		real = h.roundTrip(real)
	}
	if err := h.lim.Refund(h.ctx, real); err != nil {
		h.fail("Refund: %v", err)
	}
	h.model.refund(h.now(), tk.model)
}

func (h *harness) reset(attrs floodgate.Attributes, keys []string) {
	h.t.Helper()
	h.logf("reset %v", attrs)
	if err := h.lim.Reset(h.ctx, attrs); err != nil {
		h.fail("Reset: %v", err)
	}
	h.model.reset(keys)
}

// advance moves the clock by us µs.
func (h *harness) advance(us int64) {
	if us != 0 {
		h.clock.Advance(time.Duration(us) * time.Microsecond)
	}
}

// probeRetry checks that a denied request is admitted exactly RetryAfter
// later and not a microsecond sooner. It holds because nothing else happens
// to the keys meanwhile: time alone only ever frees capacity (windows roll,
// buckets refill, leases lapse), so the latest rule to admit decides. For
// concurrency it holds only because no lease is released in between.
func (h *harness) probeRetry(attrs floodgate.Attributes, keys []string, n int64, d floodgate.Outcome) {
	h.t.Helper()
	retry := d.RetryAfter.Microseconds()
	if retry < 1 {
		h.fail("denied without Never but RetryAfter %v", d.RetryAfter)
	}
	h.advance(retry - 1)
	if h.peek(attrs, keys, n).Allowed {
		h.fail("cost %d admitted 1µs before RetryAfter %v", n, d.RetryAfter)
	}
	h.advance(1)
	if got := h.peek(attrs, keys, n); !got.Allowed {
		h.fail("cost %d denied at RetryAfter %v: %+v", n, d.RetryAfter, got)
	}
}

// compare fails unless got is exactly what the model expects.
func (h *harness) compare(op string, got floodgate.Outcome, want outcome) {
	h.t.Helper()
	rules := got.Rules
	if len(rules) != len(want.idx) {
		h.fail("%s: %d rules applied, want %d", op, len(rules), len(want.idx))
	}
	for j, i := range want.idx {
		g, w, spec := rules[j], want.rules[j], h.specs[i]
		wantRetry := time.Duration(0)
		if !w.allowed && !w.never {
			wantRetry = us(w.retry)
		}
		if g.Name != spec.name || g.Allowed != w.allowed || g.Never != w.never || g.Shadow != spec.shadow ||
			g.Limit != want.lims[j].limit || g.Remaining != w.remaining ||
			g.ResetAfter != us(w.reset) || g.RetryAfter != wantRetry {
			h.fail("%s: rule %s (%s) answered\n  allowed=%v never=%v shadow=%v limit=%d remaining=%d reset=%v retry=%v\nwant\n  allowed=%v never=%v shadow=%v limit=%d remaining=%d reset=%v retry=%v",
				op, spec.name, spec.alg,
				g.Allowed, g.Never, g.Shadow, g.Limit, g.Remaining, g.ResetAfter, g.RetryAfter,
				w.allowed, w.never, spec.shadow, want.lims[j].limit, w.remaining, us(w.reset), wantRetry)
		}
	}
	h.compareDecision(op, got.Decision, want)
}

// compareDecision compares the decision-level answer with the model's.
func (h *harness) compareDecision(op string, got floodgate.Decision, want outcome) {
	h.t.Helper()
	e := h.expectDecision(want)
	if got.Allowed != e.Allowed || got.Reason != e.Reason || got.Never != e.Never || got.ShadowDenied != e.ShadowDenied ||
		got.Rule != e.Rule || got.Limit != e.Limit || got.Remaining != e.Remaining ||
		got.ResetAfter != e.ResetAfter || got.RetryAfter != e.RetryAfter || got.Err != nil {
		h.fail("%s: decision\n  allowed=%v reason=%q never=%v shadowDenied=%v rule=%q limit=%d remaining=%d reset=%v retry=%v err=%v\nwant\n  allowed=%v reason=%q never=%v shadowDenied=%v rule=%q limit=%d remaining=%d reset=%v retry=%v",
			op, got.Allowed, got.Reason, got.Never, got.ShadowDenied, got.Rule, got.Limit, got.Remaining, got.ResetAfter, got.RetryAfter, got.Err,
			e.Allowed, e.Reason, e.Never, e.ShadowDenied, e.Rule, e.Limit, e.Remaining, e.ResetAfter, e.RetryAfter)
	}
}

// expectDecision derives the decision-level answer from the rules' answers:
// when denied, the binding rule is the first enforced rule that can never
// admit, else the first with the longest wait; when admitted, the enforced
// rule (any rule, if all are shadow) with the fewest units left, then the
// longest reset.
func (h *harness) expectDecision(want outcome) floodgate.Decision {
	d := floodgate.Decision{Allowed: want.allowed}
	if len(want.idx) == 0 {
		return d
	}
	bind := -1
	for j, i := range want.idx {
		if !want.rules[j].allowed && h.specs[i].shadow {
			d.ShadowDenied = true
		}
	}
	if !want.allowed {
		d.Reason = floodgate.ReasonLimit
		for j, i := range want.idx {
			r := want.rules[j]
			if r.allowed || h.specs[i].shadow {
				continue
			}
			if bind < 0 || r.never && !want.rules[bind].never ||
				r.never == want.rules[bind].never && r.retry > want.rules[bind].retry {
				bind = j
			}
		}
		d.Never = want.rules[bind].never
		if !d.Never {
			d.RetryAfter = us(want.rules[bind].retry)
		}
	} else {
		for pass := 0; pass < 2 && bind < 0; pass++ {
			for j, i := range want.idx {
				if pass == 0 && h.specs[i].shadow {
					continue
				}
				r := want.rules[j]
				if bind < 0 || r.remaining < want.rules[bind].remaining ||
					r.remaining == want.rules[bind].remaining && r.reset > want.rules[bind].reset {
					bind = j
				}
			}
		}
	}
	r := want.rules[bind]
	d.Rule, d.Limit, d.Remaining, d.ResetAfter = h.specs[want.idx[bind]].name, want.lims[bind].limit, r.remaining, us(r.reset)
	return d
}

func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
