package storetest

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/scope"
	"github.com/floodgate-go/floodgate/store"
)

// Expiry lets RunConcurrent read a remote store's expiries.
type Expiry struct {
	// TTL returns the time to live of the state the store holds for an
	// op's scope (internal/scope: "limiter/rule@window") and key under
	// an algorithm, and whether it holds any; a negative ttl means the
	// state never expires.
	TTL func(scope, key string, alg store.Algorithm) (ttl time.Duration, held bool, err error)
	// Keys counts every key the store holds for a limiter: states, lease
	// sets and spent-ticket records.
	Keys func(limiter string) (int, error)
}

// liveRun is how long RunConcurrent drives each limiter.
const liveRun = 1200 * time.Millisecond

// liveCase is one limiter RunConcurrent drives: a rule with a short window
// that turns several times during the run, and how to check what it
// admitted.
type liveCase struct {
	rule floodgate.Rule
	// drive runs one caller until stop (nil: consumes, see drive).
	drive func(t *testing.T, lim *floodgate.Limiter, worker int, stop time.Time) []liveDecision
	check func(t *testing.T, c *liveCase, ds []liveDecision)
	// need is the longest time the rule's state may need to expire: a TTL
	// beyond it is wasted memory.
	need time.Duration
}

// liveDecision is one decision of RunConcurrent as its caller saw it: the
// interval of the call (µs on the wall clock), the answer, and the
// interval of the refund or release that followed it, if any.
type liveDecision struct {
	sent, recv       int64
	allowed          bool
	reset            int64 // µs
	refSent, refRecv int64 // 0: not refunded

	// A reservation's: the window its hold was taken in (the ticket's
	// stamp), and the units used and what Settle found (not settled:
	// abandoned, its hold left to lapse).
	stamp     int64
	used      int64
	settled   floodgate.Settlement
	abandoned bool
}

// RunConcurrent drives s as production does: on the store's own clock
// (limiters on the wall clock; a Redis store on the server's TIME, without
// UseBatchTime), with many callers at once on one key, so that the store
// coalesces their decisions and puts several on one key in one call, and
// with short windows that turn during the run. Every fifth admission is
// refunded at once (every lease is released after a moment), so refunds
// share calls with consumes. For every algorithm it checks what no
// schedule may break:
//
//   - a clock-aligned fixed window admits at most its limit, plus the
//     refunds of its own admissions; each decision is counted in the
//     window its answer names (its reset, from within its call);
//   - a first-hit fixed window likewise, its windows told apart by the
//     ends the answers name;
//   - a token bucket or GCRA admits at most burst + rate × span in any
//     span between a call's start and another's end, plus the refunds
//     that span can hold;
//   - a sliding window admits at most its limit in any window of
//     sub-buckets, plus those refunds;
//   - no more leases than the limit are certainly held at once;
//   - reservations on a budget (a reservable clock-aligned window) settled
//     with at most what they reserved, some abandoned to lapse, spend at
//     most the budget in every window, exactly: each settlement's usage
//     counted in the window its ticket names.
//
// With e (a remote store), it then checks that the state of every key
// has a TTL that covers what a peek says the state needs and is no longer
// than the rule can need, and that every key of every limiter is gone
// once its windows have passed.
func RunConcurrent(t *testing.T, s store.Store, e *Expiry) {
	const callers = 12
	cases := liveCases()
	prefix := fmt.Sprintf("live%d", time.Now().UnixNano()%1_000_000)
	var wg sync.WaitGroup
	results := make([][]liveDecision, len(cases))
	lims := make([]*floodgate.Limiter, len(cases))
	for i := range cases {
		c := &cases[i]
		lim, err := floodgate.New(prefix+"-"+c.rule.Name, s, []floodgate.Rule{c.rule},
			&floodgate.Options{FailurePolicy: floodgate.FailClosed})
		if err != nil {
			t.Fatalf("%s: %v", c.rule.Name, err)
		}
		lims[i] = lim
		var mu sync.Mutex
		stop := time.Now().Add(liveRun)
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ds []liveDecision
				if c.drive != nil {
					ds = c.drive(t, lim, w, stop)
				} else {
					ds = drive(t, lim, c.rule.Algorithm == floodgate.Concurrency, w, stop)
				}
				mu.Lock()
				results[i] = append(results[i], ds...)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i := range cases {
		c := &cases[i]
		t.Run(c.rule.Name, func(t *testing.T) {
			ds := results[i]
			n := 0
			for _, d := range ds {
				if d.allowed {
					n++
				}
			}
			t.Logf("%d decisions, %d admitted", len(ds), n)
			c.check(t, c, ds)
		})
	}
	if e == nil {
		return
	}
	ctx := context.Background()
	var last time.Duration
	for i := range cases {
		c, lim := &cases[i], lims[i]
		// What the hot key's state needs, then its TTL: the TTL may be read
		// a little later, never longer.
		start := time.Now()
		d, err := lim.Peek(ctx, hotKey, 1)
		if err != nil {
			t.Fatal(err)
		}
		scope := scope.Of(lim.Name(), c.rule.Name, c.rule.Algorithm, c.rule.Align, c.rule.Window)
		ttl, held, err := e.TTL(scope, hotKey["user"], c.rule.Algorithm)
		// The TTL was read up to this long after the peek, and has ms
		// resolution.
		late := time.Since(start) + time.Millisecond
		switch {
		case err != nil:
			t.Fatal(err)
		case !held && d.Remaining < ruleCapacity(c.rule) && d.ResetAfter > late:
			// (A state whose reset came before the read may be gone: an
			// aligned window's key expires with its window.)
			t.Errorf("%s: no state held, while a peek says %d of %d remain for %v more (read %v after it)",
				c.rule.Name, d.Remaining, ruleCapacity(c.rule), d.ResetAfter, late)
		case held && ttl < 0:
			t.Errorf("%s: the state has no TTL", c.rule.Name)
		case held && ttl > c.need+5*time.Millisecond:
			t.Errorf("%s: TTL %v, longer than the rule can need (%v)", c.rule.Name, ttl, c.need)
		case held && ttl+late < d.ResetAfter && c.rule.Algorithm != floodgate.Concurrency:
			t.Errorf("%s: TTL %v, but a peek says the state needs %v", c.rule.Name, ttl, d.ResetAfter)
		}
		last = max(last, c.need)
	}
	time.Sleep(last + 50*time.Millisecond)
	for i := range cases {
		n, err := e.Keys(lims[i].Name())
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s: %d keys left %v after the last decision, beyond what the rule needs", cases[i].rule.Name, n, last)
		}
	}
}

// ruleCapacity is what a rule admits at once on a key that holds nothing.
func ruleCapacity(r floodgate.Rule) int64 {
	if r.Burst > 0 {
		return r.Burst
	}
	return r.Limit
}

// hotKey is every caller's key: a value that keys hold unescaped.
var hotKey = floodgate.Attributes{"user": "hot"}

// drive runs one caller's decisions on the hot key until stop.
func drive(t *testing.T, lim *floodgate.Limiter, leases bool, worker int, stop time.Time) []liveDecision {
	ctx := context.Background()
	var ds []liveDecision
	admitted := 0
	for time.Now().Before(stop) {
		var d liveDecision
		d.sent = time.Now().UnixMicro()
		o, err := lim.Decide(ctx, floodgate.ModeConsume, hotKey, 1)
		d.recv = time.Now().UnixMicro()
		if err != nil || o.Reason == floodgate.ReasonStore {
			t.Errorf("worker %d: the store failed: %v %v", worker, err, o.Err)
			return ds
		}
		d.allowed, d.reset = o.Allowed, o.ResetAfter.Microseconds()
		if d.allowed {
			admitted++
			if leases || (admitted+worker)%5 == 0 {
				if leases {
					time.Sleep(time.Millisecond)
				}
				d.refSent = time.Now().UnixMicro()
				if err := lim.Refund(ctx, o.Ticket()); err != nil {
					t.Errorf("worker %d: refund: %v", worker, err)
				}
				d.refRecv = time.Now().UnixMicro()
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// tolerance is how far the limiters' clock and the store's may be from
// the wall clock the callers read (µs).
const tolerance = 2000

func liveCases() []liveCase {
	user := []string{"user"}
	return []liveCase{
		{rule: floodgate.Rule{Name: "fixed-clock", Algorithm: floodgate.FixedWindow, Limit: 40, Window: 200 * time.Millisecond, Align: floodgate.AlignClock, Key: user},
			check: checkAligned, need: 200 * time.Millisecond},
		{rule: floodgate.Rule{Name: "fixed-first-hit", Algorithm: floodgate.FixedWindow, Limit: 40, Window: 150 * time.Millisecond, Key: user},
			check: checkFirstHit, need: 150 * time.Millisecond},
		{rule: floodgate.Rule{Name: "token-bucket", Algorithm: floodgate.TokenBucket, Limit: 100, Window: time.Second, Burst: 20, Key: user},
			check: checkRate, need: time.Second},
		{rule: floodgate.Rule{Name: "gcra", Algorithm: floodgate.GCRA, Limit: 100, Window: time.Second, Burst: 10, Key: user},
			check: checkRate, need: time.Second},
		{rule: floodgate.Rule{Name: "sliding", Algorithm: floodgate.SlidingWindow, Limit: 30, Window: 300 * time.Millisecond, Buckets: 6, Key: user},
			check: checkSliding, need: 300 * time.Millisecond},
		{rule: floodgate.Rule{Name: "leases", Algorithm: floodgate.Concurrency, Limit: 4, Window: 500 * time.Millisecond, Key: user},
			check: checkLeases, need: 500 * time.Millisecond},
		{rule: floodgate.Rule{Name: "budget", Algorithm: floodgate.FixedWindow, Limit: 300, Window: 200 * time.Millisecond, Align: floodgate.AlignClock, Key: user, Reservable: true},
			drive: driveReservations, check: checkBudget, need: 200 * time.Millisecond},
	}
}

// driveReservations runs one caller's reservations on the hot key until
// stop: up to 100 units each (a third of the window's budget, so that
// even a slowed machine's callers meet a spent window), settled after a
// moment of work with at most what they reserved and held to their
// window's end; one in eight abandoned, held for a few milliseconds, to
// lapse.
func driveReservations(t *testing.T, lim *floodgate.Limiter, worker int, stop time.Time) []liveDecision {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(worker), uint64(time.Now().UnixNano())))
	var ds []liveDecision
	for time.Now().Before(stop) {
		units, hold := 1+rng.Int64N(100), time.Second
		d := liveDecision{abandoned: rng.IntN(8) == 0}
		if d.abandoned {
			hold = time.Duration(1+rng.IntN(20)) * time.Millisecond
		}
		d.sent = time.Now().UnixMicro()
		o, err := lim.Reserve(ctx, hotKey, units, hold)
		d.recv = time.Now().UnixMicro()
		if err != nil || o.Reason == floodgate.ReasonStore {
			t.Errorf("worker %d: the store failed: %v %v", worker, err, o.Err)
			return ds
		}
		d.allowed, d.reset = o.Allowed, o.ResetAfter.Microseconds()
		if d.allowed {
			tk := o.Ticket()
			if len(tk.Entries) != 1 {
				t.Errorf("worker %d: an admitted reservation's ticket %+v, want the budget's hold", worker, tk)
				return ds
			}
			d.stamp = tk.Entries[0].Stamp
			if !d.abandoned {
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
				d.used = rng.Int64N(units + 1)
				if d.settled, err = lim.Settle(ctx, tk, d.used); err != nil {
					t.Errorf("worker %d: settle: %v", worker, err)
					return ds
				}
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// checkBudget adds up the units each window's settlements charged: a
// settlement that found its hold charged its usage in the window its
// ticket names, one that did not came after that window ended (its hold
// lasted to it) and charged nothing. No window may have spent more than
// the budget.
func checkBudget(t *testing.T, c *liveCase, ds []liveDecision) {
	spent := map[int64]int64{}
	var settled, denied int
	for _, d := range ds {
		switch {
		case !d.allowed:
			denied++
		case !d.abandoned && d.settled == floodgate.Settled:
			settled++
			spent[d.stamp] += d.used
		case !d.abandoned && d.settled != floodgate.Lapsed:
			t.Errorf("a settlement found %v, want settled or lapsed", d.settled)
		}
	}
	var most int64
	for w, n := range spent {
		if n > c.rule.Limit {
			t.Errorf("window %d: %d units spent, more than the budget %d", w, n, c.rule.Limit)
		}
		most = max(most, n)
	}
	t.Logf("%d reservations settled over %d windows, at most %d of %d units spent in one", settled, len(spent), most, c.rule.Limit)
	if settled == 0 || denied == 0 || len(spent) < 2 {
		t.Errorf("%d settled, %d denied, over %d windows: the load did not exercise the budget", settled, denied, len(spent))
	}
}

// refunds returns the refunded decisions of ds.
func refunds(ds []liveDecision) []liveDecision {
	var out []liveDecision
	for _, d := range ds {
		if d.refSent != 0 {
			out = append(out, d)
		}
	}
	return out
}

// refundsIn counts the refunds of rs whose call overlaps [from, to]: each
// may have given a unit back within it.
func refundsIn(rs []liveDecision, from, to int64) int64 {
	var n int64
	for _, d := range rs {
		if d.refSent <= to && d.refRecv >= from {
			n++
		}
	}
	return n
}

// checkAligned counts each admission in the window whose end its answer
// names: the one multiple of the window within [sent, recv] + reset.
func checkAligned(t *testing.T, c *liveCase, ds []liveDecision) {
	w := c.rule.Window.Microseconds()
	count := map[int64][]liveDecision{}
	ambiguous := 0
	for _, d := range ds {
		if !d.allowed {
			continue
		}
		lo, hi := d.sent+d.reset-tolerance, d.recv+d.reset+tolerance
		end := (lo + w - 1) / w * w
		switch {
		case end > hi:
			t.Errorf("an admission's reset %dµs names no window end (call [%d, %d])", d.reset, d.sent, d.recv)
		case end+w <= hi:
			ambiguous++
		default:
			count[end] = append(count[end], d)
		}
	}
	for end, in := range count {
		if got, max := int64(len(in)), c.rule.Limit+int64(len(refunds(in))); got > max {
			t.Errorf("window ending %d: %d admitted, more than the limit %d and %d refunds", end, got, c.rule.Limit, max-c.rule.Limit)
		}
	}
	if ambiguous > len(ds)/10 {
		t.Errorf("%d admissions took longer than a window: too few to check", ambiguous)
	}
}

// checkFirstHit tells the windows apart by the ends the admissions name,
// [sent, recv] + reset: the windows of one key end at least a window
// apart. Admissions whose call took a quarter of a window or more (a
// loaded machine) cannot be placed and are left out.
func checkFirstHit(t *testing.T, c *liveCase, ds []liveDecision) {
	w := c.rule.Window.Microseconds()
	var adm []liveDecision
	for _, d := range ds {
		if d.allowed && d.recv-d.sent < w/4 {
			adm = append(adm, d)
		}
	}
	slices.SortFunc(adm, func(a, b liveDecision) int { return cmp.Compare(a.sent+a.reset, b.sent+b.reset) })
	for i := 0; i < len(adm); {
		j, first := i, adm[i].recv+adm[i].reset
		for j < len(adm) && adm[j].sent+adm[j].reset <= first+w/2 {
			j++
		}
		in := adm[i:j]
		if got, max := int64(len(in)), c.rule.Limit+int64(len(refunds(in))); got > max {
			t.Errorf("window ending near %d: %d admitted, more than the limit %d and %d refunds", first, got, c.rule.Limit, max-c.rule.Limit)
		}
		i = j
	}
}

// checkRate bounds the admissions of every span between one admission's
// call start and another's end by burst + rate × span (and one unit for
// the fraction of a token the span may start with).
func checkRate(t *testing.T, c *liveCase, ds []liveDecision) {
	var adm []liveDecision
	for _, d := range ds {
		if d.allowed {
			adm = append(adm, d)
		}
	}
	limit, window, rs := c.rule.Limit, c.rule.Window.Microseconds(), refunds(ds)
	for _, a := range adm {
		for _, b := range adm {
			from, to := a.sent-tolerance, b.recv+tolerance
			if to < from {
				continue
			}
			var in int64
			for _, d := range adm {
				if d.sent >= a.sent && d.recv <= b.recv {
					in++
				}
			}
			if max := c.rule.Burst + 1 + limit*(to-from)/window + refundsIn(rs, from, to); in > max {
				t.Errorf("%d admitted within %dµs, more than burst %d + rate × span and refunds (%d)", in, to-from, c.rule.Burst, max)
				return
			}
		}
	}
}

// checkSliding bounds the admissions certainly made within each window of
// sub-buckets.
func checkSliding(t *testing.T, c *liveCase, ds []liveDecision) {
	width, rs := c.rule.Window.Microseconds()/c.rule.Buckets, refunds(ds)
	counts := map[int64]int64{} // first sub-bucket → admissions within the window from it
	for _, d := range ds {
		if !d.allowed {
			continue
		}
		lo, hi := (d.sent-tolerance)/width, (d.recv+tolerance)/width
		for k := hi - c.rule.Buckets + 1; k <= lo; k++ {
			counts[k]++
		}
	}
	for k, n := range counts {
		from, to := k*width, (k+c.rule.Buckets)*width
		if max := c.rule.Limit + refundsIn(rs, from, to); n > max {
			t.Errorf("the window of sub-buckets from %d: %d admitted, more than the limit %d and refunds", k, n, c.rule.Limit)
		}
	}
}

// checkLeases bounds the leases certainly held at once: admitted by the
// end of its call, not yet asked to be released and not yet lapsed. It
// sweeps those instants in time order.
func checkLeases(t *testing.T, c *liveCase, ds []liveDecision) {
	type event struct {
		at    int64
		delta int64
	}
	var evs []event
	w := c.rule.Window.Microseconds()
	for _, d := range ds {
		// Held from the end of its call until the release was asked for,
		// or the lease lapsed (a window after the call started).
		if end := min(d.refSent, d.sent+w); d.allowed && d.recv < end {
			evs = append(evs, event{d.recv, 1}, event{end, -1})
		}
	}
	// At equal instants releases go first: a lease asked to be released
	// at t is no longer certainly held at t.
	slices.SortFunc(evs, func(a, b event) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return cmp.Compare(a.delta, b.delta)
	})
	var held int64
	for _, e := range evs {
		if held += e.delta; held > c.rule.Limit {
			t.Errorf("%d leases held at %d, more than the limit %d", held, e.at, c.rule.Limit)
			return
		}
	}
}
