// Package grant is a store.Store decorator that answers the decisions on
// hot keys in-process from quota grants, without ever admitting more than
// the store it wraps would.
//
// A grant is a block of G units of one rule key, taken from the inner
// store by one ordinary consume of cost G: the inner store counts the
// whole block at once, so its count always covers every unit any instance
// may admit, and no number of instances sharing the store can admit over
// the limit between them. Decisions on the key are then answered from the
// grant until it is spent; then the Store takes another. Unspent units go
// back to the inner store, by a refund into the grant's window or bucket,
// when the key is touched by anything but a consume (a peek, record,
// refund or reset), when the key goes idle (Options.Idle), when its
// remaining shrinks below what grants are made of, and when the Store is
// closed. A refund that fails strands its units rather than keep them: it
// may have reached the inner store.
//
// # Which decisions
//
// A consume of one rule that asks for grants (floodgate.Rule.Grant, or
// Options.Granted), an enforced fixed window or token bucket, is answered
// from its key's grant. Every other batch goes to the inner store as it is, after the
// grants of its keys are given back, so that it meets the key's whole
// count: a decision of several rules, a shadow rule, peeks, records,
// refunds (a refund of a locally answered decision goes back to the inner
// store, whose window the grant was charged to) and resets.
//
// # Grant sizing and the bound on under-admission
//
// A grant is 1/Options.Share of the units the inner store last reported
// left (the limit, or the burst, at the start of a window or for an unknown
// key), and at least the decision's cost. A fixed window whose remaining is
// too small for a grant of Options.Min units is no longer granted: its
// decisions go to the inner store one by one and answer exactly, and when
// it denies, its denial is answered locally until the window ends (as
// store/overlimit does) or Options.MaxHold passes. A token bucket's grant
// is burst/Share tokens (Min at least) whatever the bucket holds: when it
// holds fewer, the Store takes what is left if that is half a grant and
// covers the decision, or else answers the key's consumes locally as denied until the inner
// store said the grant's tokens would be there (Options.MaxHold at most).
//
// The units an instance can hold unspent at any time are one grant, at
// most 1/Share of what was left when it was taken; with n instances
// holding grants of one key, at most n/Share of the remaining is in
// grants. They are spent by the instances' own traffic, so they are lost to
// the limit only when an instance holding a grant stops deciding on the
// key: its units go back after Options.Idle, or at Close; an instance that
// dies without closing strands its grant until the grant's window ends (a
// fixed window), or for good (a token bucket: the bucket refills at its
// rate regardless, so the loss is at most one grant). A fixed window's next
// window is always whole.
//
// # Answers
//
// A locally answered decision is admitted with the grant's window stamp,
// its reset time, and as remaining the inner store's remaining when the
// grant was taken plus the grant's unspent units: with one instance that
// is exactly what the inner store would answer for a fixed window (for a
// token bucket it leaves out what refilled since the grant, so it can only
// be lower). With several instances it does not see the others' traffic.
// A denial on the inner store's word is exact; a token bucket's local
// denial while it waits for Min tokens reports the time until they refill,
// which is no earlier than the exact retry of the decision's cost.
//
// When the inner store fails, a live grant keeps answering until it is
// spent or its window ends; then the decisions fail as the inner store's
// do, and the limiter's failure policy and fallback apply.
//
// # Calls of the inner store
//
// No lock is held across a call of the inner store. A key has one call
// that moves its grant's units (taking a grant, giving units back) in
// flight at a time: the key's decisions that its grant or a held denial
// can answer are answered meanwhile, and those that need the inner store
// wait for the call in flight and take its outcome. When it fails, they
// fail with its error at once; when it succeeds, they are decided again,
// most from the grant it took. A decision passed on to the inner store as
// it is (a fixed window with too little left to grant) is its own call,
// made alongside the others. So over an inner store that bounds each call
// by a deadline (as store/guard does), a hung store makes no decision wait
// longer than one deadline, however many decisions on the key there are.
//
// The Store reads the time of each decision from Batch.Now, so the
// limiters using it must have the clock the inner store counts with (the
// wall clock for a Redis store on its server's clock).
package grant

import (
	"context"
	"errors"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// The defaults of Options.
const (
	DefaultShare   = 32
	DefaultMin     = 8
	DefaultIdle    = 250 * time.Millisecond
	DefaultMaxHold = 50 * time.Millisecond
)

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// Granted reports whether the consumes of op's rule are answered from
	// grants; nil grants the ops whose rule asks for it (Op.Grant, from
	// floodgate.Rule.Grant). It is called on every decision and must be
	// fast. Ops it accepts of any other algorithm than fixed window and
	// token bucket, shadow ops, and ops of reservable rules
	// (Params.Holds) are not granted.
	Granted func(op *store.Op) bool
	// Share is the part of a key's remaining units one grant takes at
	// most: a grant is remaining/Share; 0 means DefaultShare.
	Share int64
	// Min is the smallest grant; 0 means DefaultMin, 1 or less makes a
	// fixed window granted down to its last unit.
	Min int64
	// Idle is how long a grant may go unused before its unspent units go
	// back; 0 means DefaultIdle, a negative value never returns them
	// before a window ends or the Store closes.
	Idle time.Duration
	// MaxHold caps how long a denial is answered locally without asking
	// the inner store again (another instance may give units back
	// meanwhile); 0 means DefaultMaxHold, a negative value holds a denial
	// until it lifts.
	MaxHold time.Duration
}

// Store is a store.Store that answers the consumes of granted rule keys
// from grants of their units, and passes everything else to the store it
// wraps. It is safe for concurrent use. Close gives the unspent units
// back; closing the inner store is the caller's business.
type Store struct {
	inner   store.Store
	granted func(op *store.Op) bool
	share   int64
	min     int64
	idle    time.Duration
	maxHold int64 // µs; < 0: none
	seed    maphash.Seed
	shards  [64]shard
	stats   counters

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ store.Store = (*Store)(nil)

type shard struct {
	mu sync.Mutex
	m  map[ruleKey]*grant
	_  [48]byte // keep neighbouring shards' locks apart
}

type ruleKey struct{ scope, key string }

// grant is one rule key's grant. Times are Batch.Now readings in µs.
type grant struct {
	mu sync.Mutex // guards the fields; never held across a call of the inner store's
	// flight is the inner store's call for the key in progress, nil when
	// there is none: the key has one at a time.
	flight *flight

	params store.Params
	scope  string
	key    string

	left  int64 // units granted and not spent
	stamp int64 // the window or bucket stamp the units were charged at
	live  int64 // answered locally until then
	back  int64 // unspent units can be refunded until then
	reset int64 // the key's full quota is back then
	rem   int64 // the inner store's remaining after the last grant
	known bool  // rem is the inner store's word for the current window

	// A denial held: until hold, consumes of more than holdFits units
	// (of exactly holdCost, unless 0) are denied locally, with holdReport
	// remaining and a retry at lift.
	hold, lift                     int64
	holdFits, holdCost, holdReport int64

	dead bool // dropped from its shard: look the key up again

	lastNow int64 // the latest decision's time
	// touched is set by every decision on the key and cleared by every
	// sweep: a grant found untouched is idle (see sweep).
	touched bool
	idle    int // sweeps since the key was last decided on
}

// flight is a call of the inner store's for one key in progress. The
// decisions on the key that need the inner store meanwhile wait for it and
// take its outcome, rather than queue calls of their own, each of which
// could take the inner store's whole deadline when it hangs.
type flight struct {
	done chan struct{} // closed when the call has returned
	err  error         // its failure; nil when it succeeded or its caller gave up
}

// New returns a Store that answers granted keys of inner's from grants
// (nil options for the defaults). It starts a goroutine that gives idle
// grants back; Close stops it.
func New(inner store.Store, opts *Options) *Store {
	if opts == nil {
		opts = &Options{}
	}
	s := &Store{
		inner: inner, granted: opts.Granted, share: opts.Share, min: opts.Min,
		idle: opts.Idle, maxHold: opts.MaxHold.Microseconds(), seed: maphash.MakeSeed(),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if s.share <= 0 {
		s.share = DefaultShare
	}
	if s.min <= 0 {
		s.min = DefaultMin
	}
	if s.idle == 0 {
		s.idle = DefaultIdle
	}
	switch {
	case opts.MaxHold == 0:
		s.maxHold = DefaultMaxHold.Microseconds()
	case opts.MaxHold < 0:
		s.maxHold = -1
	}
	for i := range s.shards {
		s.shards[i].m = make(map[ruleKey]*grant)
	}
	if s.idle > 0 {
		go s.sweep()
	} else {
		close(s.done)
	}
	return s
}

// Grantable reports whether the grants of a Store can answer a rule of
// algorithm a: fixed windows and token buckets. A caller that lets users
// name granted rules (floodgate serve's config) refuses others with it.
func Grantable(a store.Algorithm) bool {
	return a == store.FixedWindow || a == store.TokenBucket
}

// Unwrap returns the store s decorates.
func (s *Store) Unwrap() store.Store { return s.inner }

// Apply answers b from a grant when it is a consume of one granted rule,
// and otherwise gives back the grants of b's keys and applies b to the
// inner store.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	if s.inner == nil {
		return errors.New("grant: no inner store")
	}
	if b.Mode == store.Consume && len(b.Ops) == 1 && s.grants(&b.Ops[0]) {
		return s.consume(ctx, b)
	}
	for i := range b.Ops {
		if op := &b.Ops[i]; s.grants(op) {
			if g := s.lookup(op, false); g != nil {
				if err := s.settle(ctx, g, b.Mode); err != nil {
					return err
				}
			}
		}
	}
	return s.inner.Apply(ctx, b)
}

// settle gives g's units back before a batch of mode m on its key goes
// to the inner store, once the call in flight for the key, if any, has
// returned.
func (s *Store) settle(ctx context.Context, g *grant, m store.Mode) error {
	g.mu.Lock()
	for f := g.flight; f != nil; f = g.flight {
		if err := wait(ctx, g, f); err != nil {
			return err
		}
		g.mu.Lock()
	}
	defer g.mu.Unlock()
	err := s.giveBack(ctx, g, m == store.Reset)
	if m != store.Peek {
		g.known, g.hold = false, 0 // the key's count moves
	}
	land(ctx, g, err)
	return err
}

// grants reports whether op's consumes are answered from grants.
func (s *Store) grants(op *store.Op) bool {
	if op.Shadow || op.Params.Holds || !Grantable(op.Params.Algorithm) {
		return false // a grant cannot see the holds of reservations
	}
	if s.granted == nil {
		return op.Grant
	}
	return s.granted(op)
}

// lookup returns op's grant, making it when make is set (nil otherwise
// when there is none).
func (s *Store) lookup(op *store.Op, make bool) *grant {
	k := ruleKey{op.Scope, op.Key}
	sh := &s.shards[maphash.String(s.seed, op.Key)&uint64(len(s.shards)-1)]
	sh.mu.Lock()
	g := sh.m[k]
	if g == nil && make {
		g = &grant{scope: op.Scope, key: op.Key, params: op.Params}
		sh.m[k] = g
	}
	sh.mu.Unlock()
	return g
}

// consume decides b, a consume of one granted rule. While another
// decision's call of the inner store for the key is in flight, b is
// answered from the grant if it can be, and otherwise waits for that call:
// it fails with the call's failure, or is decided again once the call has
// returned. A decision passed on to the inner store as it is goes as its
// own call, alongside the key's others (see pass).
func (s *Store) consume(ctx context.Context, b *store.Batch) error {
	op := &b.Ops[0]
	now := b.Now.UnixMicro()
	for {
		g := s.lookup(op, true)
		g.mu.Lock()
		if g.dead {
			g.mu.Unlock()
			continue
		}
		g.touched = true
		if now > g.lastNow {
			g.lastNow = now
		}
		f := g.flight
		if f == nil {
			passOn, err := s.decide(ctx, g, b, now)
			if passOn && err == nil {
				err = s.giveBack(ctx, g, false)
			}
			land(ctx, g, err)
			if passOn && err == nil {
				err = s.pass(ctx, g, b, now)
			}
			g.mu.Unlock()
			return err
		}
		if g.params == op.Params && (g.left == 0 || now < g.live) && s.answer(g, b, now) {
			g.mu.Unlock()
			return nil
		}
		if err := wait(ctx, g, f); err != nil {
			return err
		}
	}
}

// decide decides b, a consume of g's key at now, from the grant or with
// a grant taken from the inner store, or reports that b is to be passed on
// to the inner store as it is. Requires g.mu, and no call in flight for
// the key.
func (s *Store) decide(ctx context.Context, g *grant, b *store.Batch, now int64) (passOn bool, err error) {
	op, cost := &b.Ops[0], b.Cost
	if g.params != op.Params {
		// A changed limit: the units granted under the old one go back
		// and the key starts afresh.
		if err := s.giveBack(ctx, g, false); err != nil {
			return false, err
		}
		g.params, g.known, g.hold = op.Params, false, 0
	}
	if now >= g.reset {
		g.known = false // a new window, or a bucket since refilled
	}
	if now >= g.live {
		if now < g.back {
			if err := s.giveBack(ctx, g, false); err != nil {
				return false, err
			}
		} else {
			s.strand(g)
		}
	}
	switch {
	case s.answer(g, b, now):
		return false, nil
	case cost > s.capacity(op):
		return true, nil // never admitted: the store says so
	case op.Params.Algorithm == store.FixedWindow:
		return s.consumeWindow(ctx, g, b, now)
	default:
		return false, s.consumeBucket(ctx, g, b, now)
	}
}

// answer answers b, a consume of g's key, from g's units or its held
// denial if it can, and reports whether it did. Requires g.mu, and g's
// units to be live at now if it has any.
func (s *Store) answer(g *grant, b *store.Batch, now int64) bool {
	op, cost := &b.Ops[0], b.Cost
	switch {
	case g.left >= cost:
		s.spend(g, b, now)
	case now < g.hold && cost > g.holdFits && (g.holdCost == 0 || cost == g.holdCost) && cost <= s.capacity(op):
		s.deny(g, b, now)
	default:
		return false
	}
	s.stats.local.Add(1)
	return true
}

// consumeWindow takes a grant of a fixed window for b, or reports that b
// is to be passed on to the inner store when the window has too little
// left. Requires g.mu (see call).
func (s *Store) consumeWindow(ctx context.Context, g *grant, b *store.Batch, now int64) (passOn bool, err error) {
	op := &b.Ops[0]
	for range 2 {
		rem := op.Params.Limit
		if g.known {
			rem = g.rem
		}
		size := rem / s.share
		need := b.Cost - g.left
		if size < s.min || need > rem {
			break
		}
		res, err := s.take(ctx, g, op, now, max(size, need))
		if err != nil {
			return false, err
		}
		if res.Allowed && g.left >= b.Cost {
			s.spend(g, b, now)
			return false, nil
		}
	}
	return true, nil
}

// consumeBucket takes a grant of a token bucket for b: burst/Share
// tokens (Min at least), or what is left when that is half a grant or
// more and covers b, and holds a denial until the grant's tokens are back otherwise. A
// bucket's grant does not shrink with what is left: a drained bucket
// refills at its rate, and a grant of a refill's worth of tokens keeps the
// instances from asking for every token. Requires g.mu (see call).
func (s *Store) consumeBucket(ctx context.Context, g *grant, b *store.Batch, now int64) error {
	op := &b.Ops[0]
	need := b.Cost - g.left
	size := min(max(op.Params.Burst/s.share, s.min, need), op.Params.Burst)
	res, err := s.take(ctx, g, op, now, size)
	if err != nil {
		return err
	}
	if !res.Allowed && res.Remaining >= max(need, size/2) {
		// Half a grant or more is left: take it. Less waits for the rest,
		// or the instances would ask for every few tokens a drained bucket
		// refills.
		res, err = s.take(ctx, g, op, now, res.Remaining)
		if err != nil {
			return err
		}
	}
	if res.Allowed && g.left >= b.Cost {
		s.spend(g, b, now)
		return nil
	}
	// Too few tokens for a grant: every cost the units in hand do not
	// cover is denied until the grant's tokens are back.
	g.holdFits, g.holdCost, g.holdReport = g.left, 0, res.Remaining+g.left
	g.lift = now + max(res.RetryAfter.Microseconds(), 1)
	g.hold = s.holdEnd(now, g.lift)
	s.deny(g, b, now)
	return nil
}

// take consumes a grant of size units of op's key from the inner store
// and adds them to g when admitted. Requires g.mu (see call).
func (s *Store) take(ctx context.Context, g *grant, op *store.Op, now, size int64) (store.Result, error) {
	gb := store.Batch{Mode: store.Consume, Now: time.UnixMicro(now), Cost: size,
		Ops: []store.Op{{Scope: op.Scope, Key: op.Key, Params: op.Params}}}
	if err := s.call(ctx, g, &gb); err != nil {
		return store.Result{}, err
	}
	res, stamp := gb.Ops[0].Result, gb.Ops[0].Stamp
	g.rem, g.known = res.Remaining, true
	g.reset = resetAt(&gb, now)
	if !gb.Allowed {
		return res, nil
	}
	s.stats.grants.Add(1)
	s.stats.granted.Add(size)
	if g.left > 0 && stamp != g.stamp && op.Params.Algorithm == store.FixedWindow {
		s.strand(g) // charged to a window that has since turned
	}
	g.left += size
	g.stamp = stamp
	g.hold = 0
	if op.Params.Algorithm == store.FixedWindow {
		// The grant's window ends when the key's quota is back in full.
		g.live, g.back = g.reset, g.reset
	} else {
		// A bucket takes tokens back within one window of their charge;
		// the grant answers for half of it, which leaves the other half
		// to give the rest back.
		w := op.Params.Window.Microseconds()
		g.live, g.back = now+w/2, now+w
	}
	return res, nil
}

// pass applies b, a consume of g's key, to the inner store, and holds the
// denial it may answer. The call is b's own, not the key's flight: no
// other decision can use its outcome, so decisions passed on go alongside
// each other, each within its own deadline, rather than wait for one
// another. Their answers may come back in any order: what they teach g
// (the remaining, a held denial) may be a call old, which only sizes
// grants and holds denials; the inner store decides every unit. Requires
// g.mu, which it releases during the call.
func (s *Store) pass(ctx context.Context, g *grant, b *store.Batch, now int64) error {
	g.mu.Unlock()
	err := s.inner.Apply(ctx, b)
	g.mu.Lock()
	if err != nil {
		return err
	}
	s.stats.passed.Add(1)
	op := &b.Ops[0]
	res := &op.Result
	g.rem, g.known = res.Remaining, true
	g.reset = resetAt(b, now)
	g.hold = 0
	// A fixed window's denial holds for every cost it cannot fit until
	// the window ends; other rules' denials hold only for the cost when
	// they leave cost-1 units (see store/overlimit).
	exact := op.Params.Algorithm == store.FixedWindow || res.Remaining == b.Cost-1
	if !b.Allowed && !res.Never && res.RetryAfter > 0 && exact {
		g.holdFits, g.holdCost, g.holdReport = res.Remaining, b.Cost, res.Remaining
		if op.Params.Algorithm == store.FixedWindow {
			g.holdCost = 0 // every cost above what is left
		}
		g.lift = now + res.RetryAfter.Microseconds()
		g.hold = s.holdEnd(now, g.lift)
	}
	return nil
}

// resetAt is when the quota of the one-op batch b, answered at now, is
// whole again. An admitted fixed window's end is its stamp (its start, on
// the store's clock) and its window, exactly: the answer's reset is
// counted from the store's reading of the time, which is a round trip
// later than now.
func resetAt(b *store.Batch, now int64) int64 {
	op := &b.Ops[0]
	if p := &op.Params; b.Allowed && p.Algorithm == store.FixedWindow && (p.Align == store.AlignFirstHit || p.Align == store.AlignClock) {
		return op.Stamp + p.Window.Microseconds()
	}
	return now + op.Result.ResetAfter.Microseconds()
}

// holdEnd is when a denial held from now that lifts at lift is asked
// again at the latest.
func (s *Store) holdEnd(now, lift int64) int64 {
	if s.maxHold >= 0 {
		return min(lift, now+s.maxHold)
	}
	return lift
}

// spend answers b from g's units. Requires g.mu.
func (s *Store) spend(g *grant, b *store.Batch, now int64) {
	g.left -= b.Cost
	op := &b.Ops[0]
	op.Stamp = g.stamp
	op.Result = store.Result{
		Allowed:    true,
		Remaining:  g.rem + g.left,
		ResetAfter: micros(g.reset - now),
	}
	b.Allowed = true
}

// deny answers b from g's held denial. Requires g.mu.
func (s *Store) deny(g *grant, b *store.Batch, now int64) {
	op := &b.Ops[0]
	op.Stamp = 0
	op.Result = store.Result{
		Remaining:  g.holdReport,
		RetryAfter: micros(g.lift - now),
		ResetAfter: micros(g.reset - now),
	}
	b.Allowed = false
}

// capacity is the most units op's rule admits at once.
func (s *Store) capacity(op *store.Op) int64 {
	if op.Params.Algorithm == store.TokenBucket {
		return op.Params.Burst
	}
	return op.Params.Limit
}

// giveBack refunds g's unspent units to the inner store (or, for a reset,
// forgets them). The units leave the grant before the call: a refund that
// fails strands them, as it may have reached the store. Requires g.mu
// (see call).
func (s *Store) giveBack(ctx context.Context, g *grant, reset bool) error {
	units := g.left
	if units == 0 {
		return nil
	}
	g.left, g.live, g.back, g.hold = 0, 0, 0, 0
	if reset {
		return nil
	}
	rb := store.Batch{Mode: store.Refund, Now: time.UnixMicro(g.lastNow), Cost: units, Ticket: rand.Uint64() | 1,
		Ops: []store.Op{{Scope: g.scope, Key: g.key, Params: g.params, Stamp: g.stamp}}}
	if err := s.call(ctx, g, &rb); err != nil {
		s.stats.stranded.Add(units)
		return err
	}
	s.stats.returned.Add(units)
	g.rem += units // the store holds them again
	return nil
}

// call applies cb, a batch of g's key, to the inner store, with g.mu
// released meanwhile: the key's decisions go on being answered from the
// grant, and those that need the inner store wait for this call (see
// consume). The call is the caller's flight until it lands. Requires g.mu,
// and that no other caller's call for the key is in flight.
func (s *Store) call(ctx context.Context, g *grant, cb *store.Batch) error {
	if g.flight == nil {
		g.flight = &flight{done: make(chan struct{})}
	}
	g.mu.Unlock()
	err := s.inner.Apply(ctx, cb)
	g.mu.Lock()
	return err
}

// land ends the caller's flight for g's key, if it made a call, with err
// its outcome: the decisions waiting for it fail with err, or, when it
// succeeded or its caller gave up (ctx done), are decided again. Requires
// g.mu.
func land(ctx context.Context, g *grant, err error) {
	f := g.flight
	if f == nil {
		return
	}
	g.flight = nil
	if ctx.Err() == nil {
		f.err = err
	}
	close(f.done)
}

// wait waits for f, the call in flight for g's key, and returns its
// failure (nil when it succeeded or its caller gave up), or ctx's when ctx
// is done first. Requires g.mu, which it releases.
func wait(ctx context.Context, g *grant, f *flight) error {
	g.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// strand drops g's unspent units, which can no longer go back: their
// window has turned. Requires g.mu.
func (s *Store) strand(g *grant) {
	s.stats.stranded.Add(g.left)
	g.left, g.live, g.back = 0, 0, 0
}

// sweep gives idle grants back until Close: every Idle/2, the grants of
// keys no decision touched since the sweep before, so each grant unused
// for Idle goes back after Idle to 1.5 × Idle. Decisions mark their grant
// touched rather than read the clock, which would cost more than the rest
// of a local answer.
func (s *Store) sweep() {
	defer close(s.done)
	t := time.NewTicker(s.idle / 2)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			s.each(func(g *grant) {
				if g.touched {
					g.touched, g.idle = false, 0
					return
				}
				g.idle++
				s.release(ctx, g)
			})
			cancel()
		}
	}
}

// forgetSweeps is how many sweeps a key with no grant goes undecided
// before its state is forgotten.
const forgetSweeps = 240

// releaseTimeout bounds the refunds of one sweep, or of Close.
const releaseTimeout = 2 * time.Second

// release gives g's units back, or strands them when their window has
// turned or ctx is done. A key with a call in flight is in use: its units
// stay. Requires g.mu.
func (s *Store) release(ctx context.Context, g *grant) {
	switch {
	case g.left == 0:
	case g.lastNow >= g.back || ctx.Err() != nil:
		s.strand(g)
	case g.flight == nil:
		land(ctx, g, s.giveBack(ctx, g, false)) // a failure strands them
	}
}

// each calls f with every grant, its lock held (f may release it
// meanwhile, and returns with it held).
func (s *Store) each(f func(g *grant)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		gs := make([]*grant, 0, len(sh.m))
		for k, g := range sh.m {
			if g.mu.TryLock() {
				if g.left == 0 && g.flight == nil && !g.touched && g.idle > forgetSweeps {
					g.dead = true // forget keys long unused
					delete(sh.m, k)
				}
				g.mu.Unlock()
			}
			gs = append(gs, g)
		}
		sh.mu.Unlock()
		for _, g := range gs {
			g.mu.Lock()
			f(g)
			g.mu.Unlock()
		}
	}
}

// Close gives every grant's unspent units back to the inner store (within
// two seconds in all: what an unreachable store does not take back by then
// is stranded) and stops the Store's goroutine. Decisions after Close
// still work, and take grants again.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	s.each(func(g *grant) {
		for f := g.flight; f != nil && ctx.Err() == nil; f = g.flight {
			wait(ctx, g, f)
			g.mu.Lock()
		}
		s.release(ctx, g)
	})
	return nil
}

// Stats are a Store's counts since it was made.
type Stats struct {
	// Grants is the grants taken from the inner store, and Granted the
	// units they held.
	Grants, Granted int64
	// Returned is the units given back unspent.
	Returned int64
	// Stranded is the units granted and neither spent nor given back:
	// their window turned first, or the refund giving them back failed.
	Stranded int64
	// Local is the decisions answered from grants or held denials, and
	// Passed the granted keys' consumes that went to the inner store.
	Local, Passed int64
}

type counters struct {
	grants, granted, returned, stranded, local, passed atomic.Int64
}

// Stats returns s's counts.
func (s *Store) Stats() Stats {
	c := &s.stats
	return Stats{Grants: c.grants.Load(), Granted: c.granted.Load(), Returned: c.returned.Load(),
		Stranded: c.stranded.Load(), Local: c.local.Load(), Passed: c.passed.Load()}
}

// micros is a µs count as a Duration.
func micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
