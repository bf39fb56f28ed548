package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
)

// deployment is where a reservation test runs: a single node or a Cluster.
type deployment struct {
	name    string
	addrs   []string
	cluster bool
	nodes   []*redistest.Server
}

// deployments starts a single node and a three-master Cluster.
func deployments(t *testing.T) []deployment {
	srv := redistest.Start(t)
	cl := redistest.StartCluster(t)
	return []deployment{
		{"single", []string{srv.Addr}, false, []*redistest.Server{srv}},
		{"cluster", cl.Addrs(), true, cl.Nodes},
	}
}

// do sends a command about a key to the node of d that holds it, as
// redis-cli -c would, and returns its reply.
func (d deployment) do(t *testing.T, args ...string) string {
	t.Helper()
	var last error
	for _, n := range d.nodes {
		r, err := n.Do(args...)
		if err == nil {
			return r
		}
		if last = err; !strings.HasPrefix(err.Error(), "MOVED") {
			break
		}
	}
	t.Fatalf("%v: %v", args, last)
	return ""
}

// budgetCase is a limiter with a reservable budget of 100 units per
// window, keyed by tenant, and a gate of 2 requests per hour, keyed by
// user (on another slot in a Cluster): the shape of an LLM gateway's
// limits.
type budgetCase struct {
	d      deployment
	lim    *floodgate.Limiter
	name   string // the limiter's
	scope  string // the budget's, "name/budget@1h"
	attrs  floodgate.Attributes
	tenant string
}

const budgetLimit = 100

func newBudgetCase(t *testing.T, d deployment, name string, align floodgate.Align, window time.Duration) *budgetCase {
	t.Helper()
	lim, err := floodgate.New(name, serverStore(t, d.addrs, d.cluster, nil), []floodgate.Rule{
		{Name: "budget", Algorithm: floodgate.FixedWindow, Limit: budgetLimit, Window: window, Align: align, Key: []string{"tenant"}, Reservable: true},
		{Name: "gate", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour, Key: []string{"user"}},
	}, patient)
	if err != nil {
		t.Fatal(err)
	}
	if align != floodgate.AlignFirstHit {
		clearOfTurn(window)
	}
	c := &budgetCase{d: d, lim: lim, name: name, tenant: "t", scope: name + "/budget@" + shortWindow(window)}
	c.attrs = floodgate.Attributes{"tenant": c.tenant, "user": "u"}
	if d.cluster { // a user whose gate lives on another slot than the budget
		for i := 0; ; i++ {
			u := "u" + strconv.Itoa(i)
			if d.do(t, "CLUSTER", "KEYSLOT", c.holdsKey()) != d.do(t, "CLUSTER", "KEYSLOT", "{"+name+"/gate@1h:"+u+"}") {
				c.attrs["user"] = u
				break
			}
		}
	}
	return c
}

// clearOfTurn waits, if need be, until the clock-aligned window of w
// that holds the time has at least 3/4 of it or 3 s to go, so that a test
// of a few steps does not see it turn.
func clearOfTurn(w time.Duration) {
	margin := min(3*w/4, 3*time.Second)
	if left := w - time.Duration(time.Now().UnixNano())%w; left < margin {
		time.Sleep(left + 10*time.Millisecond)
	}
}

func shortWindow(w time.Duration) string {
	if w >= time.Hour {
		return strconv.Itoa(int(w/time.Hour)) + "h"
	}
	return strconv.Itoa(int(w/time.Second)) + "s"
}

// holdsKey is the budget's sorted set of holds.
func (c *budgetCase) holdsKey() string { return "fg:{" + c.scope + ":" + c.tenant + "}:holds" }

// hold is one hold as redis-cli shows it: the member "ticket:units:n"
// and its score, when it lapses (µs).
type hold struct {
	units, n, lapse int64
}

// holds returns the budget key's holds by ticket.
func (c *budgetCase) holds(t *testing.T) map[uint64]hold {
	t.Helper()
	f := strings.Fields(c.d.do(t, "ZRANGE", c.holdsKey(), "0", "-1", "WITHSCORES"))
	out := map[uint64]hold{}
	for i := 0; i+1 < len(f); i += 2 {
		var id uint64
		var h hold
		if _, err := fmt.Sscanf(f[i]+" "+f[i+1], "%d:%d:%d %d", &id, &h.units, &h.n, &h.lapse); err != nil {
			t.Fatalf("hold %s scored %s: %v", f[i], f[i+1], err)
		}
		out[id] = h
	}
	return out
}

// budget returns what a peek says of the budget rule.
func (c *budgetCase) budget(t *testing.T) floodgate.RuleDecision {
	t.Helper()
	o, err := c.lim.Decide(context.Background(), floodgate.ModePeek, floodgate.Attributes{"tenant": c.tenant}, 1)
	if err != nil || o.Reason == floodgate.ReasonStore || len(o.Rules) != 1 {
		t.Fatalf("peek: %+v, %v", o, err)
	}
	return o.Rules[0]
}

func (c *budgetCase) remaining(t *testing.T) int64 { return c.budget(t).Remaining }

func (c *budgetCase) reserve(t *testing.T, units int64, hold time.Duration) floodgate.Outcome {
	t.Helper()
	o, err := c.lim.Reserve(context.Background(), c.attrs, units, hold)
	if err != nil || o.Reason == floodgate.ReasonStore {
		t.Fatalf("reserve %d: %+v, %v", units, o.Decision, err)
	}
	return o
}

func (c *budgetCase) settle(t *testing.T, o floodgate.Outcome, used int64) floodgate.Settlement {
	t.Helper()
	s, err := c.lim.Settle(context.Background(), o.Ticket(), used)
	if err != nil {
		t.Fatalf("settle %d: %v", used, err)
	}
	return s
}

func (c *budgetCase) settleOldest(t *testing.T, used int64) floodgate.Settlement {
	t.Helper()
	s, err := c.lim.SettleOldest(context.Background(), c.attrs, used)
	if err != nil {
		t.Fatalf("settle oldest %d: %v", used, err)
	}
	return s
}

// eventually waits up to within for cond.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not after %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func want[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s: %v, want %v", what, got, want)
	}
}

// TestReservations runs the reservation contract on the server's clock,
// on a single node and a Cluster, for a budget of first-hit windows and
// one of clock-aligned windows.
func TestReservations(t *testing.T) {
	for _, d := range deployments(t) {
		for _, align := range []floodgate.Align{floodgate.AlignFirstHit, floodgate.AlignClock} {
			t.Run(d.name+"/"+align.String(), func(t *testing.T) {
				t.Parallel()
				n := 0
				run := func(name string, window time.Duration, f func(t *testing.T, c *budgetCase)) {
					n++
					lim := fmt.Sprintf("res%d-%s-%s", n, d.name, align)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						f(t, newBudgetCase(t, d, lim, align, window))
					})
				}
				run("all or nothing", time.Hour, func(t *testing.T, c *budgetCase) { testReserveAllOrNothing(t, c) })
				run("holds count", time.Hour, func(t *testing.T, c *budgetCase) { testHoldsCount(t, c) })
				run("settle", time.Hour, func(t *testing.T, c *budgetCase) { testSettle(t, c) })
				if align == floodgate.AlignFirstHit {
					run("large units", time.Hour, func(t *testing.T, c *budgetCase) { testLargeUnits(t, c) })
				}
				run("settle after lapse", time.Hour, func(t *testing.T, c *budgetCase) { testSettleAfterLapse(t, c) })
				run("hold ends with the window", 2*time.Second, func(t *testing.T, c *budgetCase) { testHoldEndsWithWindow(t, c, align) })
				run("settle oldest", time.Hour, func(t *testing.T, c *budgetCase) { testSettleOldest(t, c, align) })
				run("reset", time.Hour, func(t *testing.T, c *budgetCase) { testResetHolds(t, c, align) })
			})
		}
	}
}

// A reservation is all or nothing with the request's other rules: one
// that a rule denies holds and charges nothing, on its slot or the
// others (a Cluster compensates the slots that admitted).
func testReserveAllOrNothing(t *testing.T, c *budgetCase) {
	ctx := context.Background()
	// The gate full: a reservation holds nothing.
	for range 2 {
		if d := c.lim.Allow(ctx, floodgate.Attributes{"user": c.attrs["user"]}); !d.Allowed {
			t.Fatalf("gate: %+v", d)
		}
	}
	if o := c.reserve(t, 30, time.Minute); o.Allowed || o.Rule != "gate" {
		t.Fatalf("reservation past a full gate: %+v", o.Decision)
	}
	want(t, "budget remaining after a reservation the gate denied", c.remaining(t), budgetLimit)
	want(t, "holds after a reservation the gate denied", len(c.holds(t)), 0)

	// The budget short: the gate is not charged.
	other := floodgate.Attributes{"tenant": c.tenant, "user": c.attrs["user"] + "x"}
	o, err := c.lim.Reserve(ctx, other, 60, time.Minute)
	if err != nil || !o.Allowed {
		t.Fatalf("reservation of 60: %+v, %v", o.Decision, err)
	}
	o, err = c.lim.Reserve(ctx, other, 60, time.Minute)
	if err != nil || o.Allowed || o.Rule != "budget" || o.Rules[1].Remaining != 1 {
		t.Fatalf("second reservation of 60 on a budget of 100: %+v %+v, %v", o.Decision, o.Rules, err)
	}
	if d, _ := c.lim.Peek(ctx, floodgate.Attributes{"user": other["user"]}, 1); d.Remaining != 1 {
		t.Errorf("gate after a reservation the budget denied: %d remaining, want 1", d.Remaining)
	}
	want(t, "budget remaining", c.remaining(t), 40)
	want(t, "holds", len(c.holds(t)), 1)
}

// Held units count against the budget as charged ones do, for every
// decision; a hold is a member "ticket:units" scored by when it lapses,
// and its set expires with it.
func testHoldsCount(t *testing.T, c *budgetCase) {
	ctx := context.Background()
	before := time.Now()
	o := c.reserve(t, 30, time.Minute)
	if !o.Allowed || o.Rules[0].Remaining != 70 {
		t.Fatalf("reservation of 30: %+v %+v", o.Decision, o.Rules)
	}
	want(t, "budget remaining", c.remaining(t), 70)
	hs := c.holds(t)
	h, ok := hs[o.Ticket().ID]
	if !ok || len(hs) != 1 || h.units != 30 || h.n != 1 {
		t.Fatalf("holds %v, want the first of ticket %d, for 30 units", hs, o.Ticket().ID)
	}
	lapse := h.lapse
	if lo, hi := before.Add(time.Minute-time.Second).UnixMicro(), time.Now().Add(time.Minute+time.Second).UnixMicro(); lapse < lo || lapse > hi {
		t.Errorf("hold lapses at %d, want about a minute from now (%d..%d)", lapse, lo, hi)
	}
	if ttl, _ := strconv.Atoi(c.d.do(t, "PTTL", c.holdsKey())); ttl < 58_000 || ttl > 60_000 {
		t.Errorf("holds' TTL %d ms, want the hold's minute", ttl)
	}
	if d := must(c.lim.Decide(ctx, floodgate.ModeConsume, floodgate.Attributes{"tenant": c.tenant}, 71)); d.Allowed {
		t.Errorf("71 units past a hold of 30 of 100 admitted")
	}
	if d := must(c.lim.Decide(ctx, floodgate.ModeConsume, floodgate.Attributes{"tenant": c.tenant}, 70)); !d.Allowed || d.Remaining != 0 {
		t.Errorf("70 units beside a hold of 30 of 100: %+v", d.Decision)
	}
	if d, _ := c.lim.Record(ctx, floodgate.Attributes{"tenant": c.tenant}, 5); d.Allowed || d.Remaining != 0 {
		t.Errorf("record of 5 on a full budget: %+v", d)
	}
	if s := c.settle(t, o, 0); s != floodgate.Settled {
		t.Errorf("release: %v", s)
	}
	want(t, "budget remaining after the release", c.remaining(t), 25)
}

// Units past what a double's %.14g writes are held and settled exactly.
func testLargeUnits(t *testing.T, c *budgetCase) {
	const limit, units = 1 << 51, 2_000_000_000_000_000
	lim, err := floodgate.New(c.name+"-large", serverStore(t, c.d.addrs, c.d.cluster, nil), []floodgate.Rule{
		{Name: "budget", Algorithm: floodgate.FixedWindow, Limit: limit, Window: time.Hour, Key: []string{"tenant"}, Reservable: true},
	}, patient)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o, err := lim.Reserve(ctx, c.attrs, units, time.Minute)
	if err != nil || !o.Allowed || o.Remaining != limit-units {
		t.Fatalf("reservation of %d of %d: %+v, %v", int64(units), int64(limit), o.Decision, err)
	}
	key := "fg:{" + c.name + "-large/budget@1h:" + c.tenant + "}:holds"
	if m := strings.Fields(c.d.do(t, "ZRANGE", key, "0", "-1")); len(m) != 1 || m[0] != fmt.Sprintf("%d:%d:1", o.Ticket().ID, int64(units)) {
		t.Errorf("holds %v", m)
	}
	if s, err := lim.Settle(ctx, o.Ticket(), units-1); err != nil || s != floodgate.Settled {
		t.Fatalf("settle: %v, %v", s, err)
	}
	if d, _ := lim.Peek(ctx, c.attrs, 1); d.Remaining != limit-units+1 {
		t.Errorf("after settling %d: %d remaining, want %d", int64(units-1), d.Remaining, int64(limit-units+1))
	}
}

// Settle charges the units used in the hold's place, below or above it,
// once.
func testSettle(t *testing.T, c *budgetCase) {
	below := c.reserve(t, 30, time.Minute)
	above := c.reserve(t, 20, time.Minute)
	want(t, "budget remaining with 50 held", c.remaining(t), 50)
	want(t, "settle below", c.settle(t, below, 10), floodgate.Settled)
	want(t, "budget remaining after 10 used of 30", c.remaining(t), 70)
	want(t, "settle above", c.settle(t, above, 45), floodgate.Settled)
	want(t, "budget remaining after 45 used of 20", c.remaining(t), 45)
	want(t, "holds left", len(c.holds(t)), 0)
	want(t, "settled twice", c.settle(t, below, 30), floodgate.AlreadySettled)
	if err := c.lim.Release(context.Background(), above.Ticket()); err != nil {
		t.Fatal(err)
	}
	if err := c.lim.Refund(context.Background(), above.Ticket()); err != nil {
		t.Fatal(err)
	}
	want(t, "budget remaining after settling twice, a release and a refund", c.remaining(t), 45)
}

// A hold not settled in time gives its units back by itself; settled
// later, it charges the units used all the same, while its window lasts.
func testSettleAfterLapse(t *testing.T, c *budgetCase) {
	const hold = 300 * time.Millisecond
	o := c.reserve(t, 30, hold)
	took := eventually(t, hold+time.Second, "the hold's units back", func() bool { return c.remaining(t) == budgetLimit })
	if took < hold-50*time.Millisecond {
		t.Errorf("the hold's units back after %v, before its time %v", took, hold)
	}
	want(t, "settle after the hold lapsed", c.settle(t, o, 10), floodgate.Lapsed)
	want(t, "budget remaining", c.remaining(t), 90)
	want(t, "settled again", c.settle(t, o, 10), floodgate.AlreadySettled)
	want(t, "budget remaining", c.remaining(t), 90)
}

// A hold lapses with its window, however long it was asked for; settled
// after, it charges nothing (its window is gone).
func testHoldEndsWithWindow(t *testing.T, c *budgetCase, align floodgate.Align) {
	o := c.reserve(t, 30, time.Hour)
	b := c.budget(t)
	if b.Remaining != 70 || b.ResetAfter > 2*time.Second {
		t.Fatalf("budget with a hold: %+v", b)
	}
	for _, h := range c.holds(t) {
		if until := time.UnixMicro(h.lapse); time.Until(until) > 2*time.Second {
			t.Errorf("a hold of an hour in a window of 2s lapses in %v", time.Until(until))
		}
	}
	eventually(t, 3*time.Second, "the window's end", func() bool { return c.remaining(t) == budgetLimit })
	want(t, "settle after the window", c.settle(t, o, 10), floodgate.Lapsed)
	want(t, "budget remaining in the next window", c.remaining(t), budgetLimit)
	eventually(t, 3*time.Second, "the holds' set gone", func() bool { return c.d.do(t, "EXISTS", c.holdsKey()) == "0" })
}

// SettleOldest ends the hold that lapses first, whoever took it, or
// charges alone when none is live.
func testSettleOldest(t *testing.T, c *budgetCase, align floodgate.Align) {
	// Both holds must lapse before the window ends, or they would lapse
	// together with it: near the end of an aligned hour they are shorter.
	lateHold, earlyHold := 10*time.Minute, 5*time.Minute
	if align != floodgate.AlignFirstHit {
		left := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour))
		if left < 30*time.Second {
			time.Sleep(left + 100*time.Millisecond)
			left = time.Hour
		}
		lateHold = min(lateHold, left-15*time.Second)
		earlyHold = lateHold / 2
	}
	late := c.reserve(t, 20, lateHold)
	early := c.reserve(t, 30, earlyHold)
	b := c.budget(t)
	if b.Remaining != 50 {
		t.Fatalf("budget with 50 held: %+v", b)
	}
	// 60 units fit once the earlier hold lapses (nothing is charged).
	d := must(c.lim.Decide(context.Background(), floodgate.ModeConsume, floodgate.Attributes{"tenant": c.tenant}, 60))
	if r := d.Rules[0]; d.Allowed || r.RetryAfter > earlyHold || r.RetryAfter < earlyHold-2*time.Second {
		t.Errorf("60 units beside holds of 20 (%v) and 30 (%v): %+v, want denied for about %v", lateHold, earlyHold, r, earlyHold)
	}
	end := time.Now().Add(time.Hour) // a first-hit window's, opened just now
	if align != floodgate.AlignFirstHit {
		end = time.Now().Truncate(time.Hour).Add(time.Hour)
	}
	if d := time.Until(end) - b.ResetAfter; d < -time.Second || d > 2*time.Second {
		t.Errorf("a window holding holds resets in %v, want at its end (in %v)", b.ResetAfter, time.Until(end))
	}
	want(t, "settle oldest", c.settleOldest(t, 5), floodgate.Settled)
	hs := c.holds(t)
	if _, ok := hs[late.Ticket().ID]; !ok || len(hs) != 1 {
		t.Errorf("holds after settling the oldest: %v, want the later one's (ticket %d)", hs, late.Ticket().ID)
	}
	want(t, "budget remaining", c.remaining(t), 75)
	want(t, "settle oldest", c.settleOldest(t, 7), floodgate.Settled)
	want(t, "budget remaining", c.remaining(t), 88)
	want(t, "settle oldest with none held", c.settleOldest(t, 4), floodgate.Lapsed)
	want(t, "budget remaining", c.remaining(t), 84)
	want(t, "settling a ticket whose hold was settled as the oldest", c.settle(t, early, 1), floodgate.Lapsed)
	want(t, "budget remaining", c.remaining(t), 83)

	// Holds that lapse together (at the window's end) go in the order
	// they were taken, whatever their tickets.
	var taken []uint64
	for range 5 {
		o, err := c.lim.Reserve(context.Background(), floodgate.Attributes{"tenant": c.tenant}, 3, 2*time.Hour)
		if err != nil || !o.Allowed {
			t.Fatalf("reserve: %+v, %v", o.Decision, err)
		}
		taken = append(taken, o.Ticket().ID)
	}
	for i, id := range taken {
		hs := c.holds(t)
		if h, ok := hs[id]; !ok || len(hs) != len(taken)-i || h.n != int64(i+1) {
			t.Fatalf("holds %v before settling the oldest, want ticket %d numbered %d first", hs, id, i+1)
		}
		want(t, "settle oldest of holds lapsing together", c.settleOldest(t, 0), floodgate.Settled)
	}
	want(t, "budget remaining", c.remaining(t), 83)
}

// A reset forgets the holds with the count.
func testResetHolds(t *testing.T, c *budgetCase, align floodgate.Align) {
	o := c.reserve(t, 30, time.Minute)
	if err := c.lim.Reset(context.Background(), c.attrs); err != nil {
		t.Fatal(err)
	}
	want(t, "budget remaining after a reset", c.remaining(t), budgetLimit)
	want(t, "holds' set after a reset", c.d.do(t, "EXISTS", c.holdsKey()), "0")
	want(t, "settle after a reset", c.settle(t, o, 10), floodgate.Lapsed)
	// An aligned window is the clock's: the reset one is still current. A
	// first-hit window is gone with the reset.
	after := int64(budgetLimit - 10)
	if align == floodgate.AlignFirstHit {
		after = budgetLimit
	}
	want(t, "budget remaining after a settle", c.remaining(t), after)
}

// TestClusterReservationOnMigratingSlot reserves and settles on a budget
// whose slot is held migrating with no key moved: a new key's state and
// holds, and a settlement's spent-ticket record, exist on neither node,
// so every call of several keys is refused (TRYAGAIN) for as long as the
// slot migrates; the store makes the missing keys first (prime) or takes
// the call apart. Every step answers as off a migration, the settlement
// is applied once, and every key written has a TTL.
func TestClusterReservationOnMigratingSlot(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	d := deployment{"cluster", cl.Addrs(), true, cl.Nodes}
	owners := slotOwners(t, cl.Nodes[0])
	for _, align := range []floodgate.Align{floodgate.AlignFirstHit, floodgate.AlignClock} {
		t.Run(align.String(), func(t *testing.T) {
			c := newBudgetCase(t, d, "mig-"+align.String(), align, time.Hour)
			slot, _ := strconv.Atoi(d.do(t, "CLUSTER", "KEYSLOT", c.holdsKey()))
			var from, to *redistest.Server
			for _, n := range cl.Nodes {
				if n.Addr == owners[slot] {
					from = n
				} else {
					to = n
				}
			}
			mg := cl.BeginMigration(t, slot, from, to)
			first := c.reserve(t, 30, time.Minute)
			second := c.reserve(t, 20, 2*time.Minute)
			if !first.Allowed || !second.Allowed {
				t.Fatalf("reservations on a migrating slot: %+v, %+v", first.Decision, second.Decision)
			}
			want(t, "budget remaining with 50 held", c.remaining(t), 50)
			want(t, "settle", c.settle(t, first, 10), floodgate.Settled)
			want(t, "settle again", c.settle(t, first, 10), floodgate.AlreadySettled)
			want(t, "settle oldest", c.settleOldest(t, 5), floodgate.Settled)
			want(t, "settle oldest with none held", c.settleOldest(t, 1), floodgate.Lapsed)
			want(t, "budget remaining", c.remaining(t), 84)
			mg.Finish()
			want(t, "budget remaining after the migration", c.remaining(t), 84)
			checkTTLs(t, cl)
		})
	}
}

// TestReservationIsOneCall counts server commands: a reservation over two
// rules is one FCALL, and so is its settlement.
func TestReservationIsOneCall(t *testing.T) {
	srv := redistest.Start(t)
	lim := dailyBudget(t, "calls", serverStore(t, []string{srv.Addr}, false, nil), 1_000_000, noonZone())
	ctx := context.Background()
	attrs := floodgate.Attributes{"tenant": "t", "user": "u"}
	srv.MustDo("CONFIG", "RESETSTAT")
	const n = 50
	for range n {
		o, err := lim.Reserve(ctx, attrs, 100, time.Minute)
		if err != nil || !o.Allowed {
			t.Fatalf("reserve: %+v, %v", o.Decision, err)
		}
		if s, err := lim.Settle(ctx, o.Ticket(), 40); err != nil || s != floodgate.Settled {
			t.Fatalf("settle: %v, %v", s, err)
		}
	}
	if calls := srv.CommandCalls(); calls["fcall"] != 2*n {
		t.Fatalf("commands for %d reservations and settlements: %v, want %d fcall", n, calls, 2*n)
	}
}

// TestReservationSentTwiceHoldsOnce applies one reservation twice, as the
// store does when a call's connection broke after it may have run: the
// ticket holds once.
func TestReservationSentTwiceHoldsOnce(t *testing.T) {
	srv := redistest.Start(t)
	st := serverStore(t, []string{srv.Addr}, false, nil)
	now := time.Now()
	budget := store.Params{Algorithm: store.FixedWindow, Limit: 100, Window: time.Hour, Holds: true}
	for range 2 {
		b := &store.Batch{Mode: store.Consume, Now: now, Cost: 1, Ticket: 42, Hold: store.Hold{Units: 5, Until: now.Add(time.Minute).UnixMicro()},
			Ops: []store.Op{{Scope: "twice/budget@1h", Key: "t", Params: budget, Held: true}}}
		if err := st.Apply(context.Background(), b); err != nil || !b.Allowed || b.Ops[0].Result.Remaining != 95 {
			t.Fatalf("reservation: %+v %+v, %v", b, b.Ops[0].Result, err)
		}
	}
	if m := srv.MustDo("ZRANGE", "fg:{twice/budget@1h:t}:holds", "0", "-1"); m != "42:5:1" {
		t.Errorf("holds %q, want one of ticket 42", m)
	}
}
