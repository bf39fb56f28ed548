package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/store"
)

// fixture is one limiter on a manual clock, for the hand-written scenarios.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	clock *clocktest.Manual
	lim   *floodgate.Limiter
}

// scenarioStart is where the scenarios' clocks start: a Wednesday, mid-month,
// far from any time zone change.
var scenarioStart = time.Date(2024, 5, 15, 12, 0, 0, 0, time.UTC)

func newFixture(t *testing.T, store *sharedStore, name string, opts *floodgate.Options, rules ...floodgate.Rule) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), clock: store.clockAt(scenarioStart)}
	if opts == nil {
		opts = &floodgate.Options{}
	}
	opts.Clock = f.clock
	lim, err := floodgate.New(name, store.Store, rules, opts)
	if err != nil {
		t.Fatalf("floodgate.New: %v", err)
	}
	f.lim = lim
	return f
}

// allow asks for n units (0 peeks).
func (f *fixture) allow(attrs floodgate.Attributes, n int64) floodgate.Outcome {
	f.t.Helper()
	d, err := f.lim.Decide(f.ctx, floodgate.ModeConsume, attrs, n)
	if err != nil {
		f.t.Fatalf("AllowN(%v, %d): %v", attrs, n, err)
	}
	if d.Err != nil {
		f.t.Fatalf("AllowN(%v, %d): store error %v", attrs, n, d.Err)
	}
	return d
}

// admit asks for n units and fails unless they are admitted.
func (f *fixture) admit(attrs floodgate.Attributes, n int64) floodgate.Outcome {
	f.t.Helper()
	d := f.allow(attrs, n)
	if !d.Allowed {
		f.t.Fatalf("AllowN(%v, %d) denied: %+v", attrs, n, d)
	}
	return d
}

// remaining peeks and returns each rule's remaining units by rule name.
func (f *fixture) remaining(attrs floodgate.Attributes) map[string]int64 {
	f.t.Helper()
	d := f.allow(attrs, 0)
	out := map[string]int64{}
	for _, r := range d.Rules {
		out[r.Name] = r.Remaining
	}
	return out
}

func (f *fixture) refund(d floodgate.Outcome) {
	f.t.Helper()
	if err := f.lim.Refund(f.ctx, d.Ticket()); err != nil {
		f.t.Fatalf("Refund: %v", err)
	}
}

func ruleOf(t *testing.T, d floodgate.Outcome, name string) floodgate.RuleDecision {
	t.Helper()
	for _, r := range d.Rules {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("decision has no rule %q: %+v", name, d.Rules)
	return floodgate.RuleDecision{}
}

// counterRule is a rule of algorithm alg that, on a clock that does not
// move, admits exactly limit units.
func counterRule(name string, alg floodgate.Algorithm, limit int64, key ...string) floodgate.Rule {
	return floodgate.Rule{Name: name, Algorithm: alg, Limit: limit, Window: time.Minute, Key: key}
}

func testAllOrNothing(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			f := newFixture(t, store, "aon-"+alg.String(), nil,
				counterRule("global", floodgate.FixedWindow, 5),
				counterRule("per-user", alg, 3, "user"))
			x, y := floodgate.Attributes{"user": "x"}, floodgate.Attributes{"user": "y"}
			for range 3 {
				f.admit(x, 1)
			}
			d := f.allow(x, 1)
			if d.Allowed || d.Rule != "per-user" || d.Reason != floodgate.ReasonLimit {
				t.Fatalf("4th request of x: %+v, want denied by per-user", d)
			}
			if r := ruleOf(t, d, "global"); !r.Allowed || r.Remaining != 2 {
				t.Fatalf("global rule in the denied decision: %+v, want allowed with 2 left", r)
			}
			if got := f.remaining(x); got["global"] != 2 || got["per-user"] != 0 {
				t.Fatalf("after a denial: remaining %v, want global 2, per-user 0", got)
			}
			d = f.allow(y, 3)
			if d.Allowed || d.Rule != "global" {
				t.Fatalf("3 units for y with 2 left globally: %+v, want denied by global", d)
			}
			if r := ruleOf(t, d, "per-user"); !r.Allowed || r.Remaining != 3 {
				t.Fatalf("per-user rule of y in the denied decision: %+v, want allowed with 3 left", r)
			}
			if got := f.remaining(y); got["global"] != 2 || got["per-user"] != 3 {
				t.Fatalf("after a denial: remaining %v, want global 2, per-user 3", got)
			}
			f.admit(y, 2)
			if got := f.remaining(y); got["global"] != 0 || got["per-user"] != 1 {
				t.Fatalf("after 2 units for y: remaining %v, want global 0, per-user 1", got)
			}
		})
	}
}

// testAllOrNothingConcurrent races many callers over a shared global rule and
// per-user rules on a frozen clock. Denials must charge nothing, so the
// units charged to the per-user rules add up to exactly what was admitted,
// which is exactly the global limit.
func testAllOrNothingConcurrent(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	const users, workers, attempts, global, perUser = 8, 16, 10, 50, 10
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			f := newFixture(t, store, "race-"+alg.String(), nil,
				counterRule("global", floodgate.FixedWindow, global),
				counterRule("per-user", alg, perUser, "user"))
			var wg sync.WaitGroup
			admitted := make([]int, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					attrs := floodgate.Attributes{"user": fmt.Sprint(w % users)}
					for range attempts {
						if f.lim.Allow(f.ctx, attrs).Allowed {
							admitted[w]++
						}
					}
				}()
			}
			wg.Wait()
			total, charged := 0, int64(0)
			for _, n := range admitted {
				total += n
			}
			for u := range users {
				rem := f.remaining(floodgate.Attributes{"user": fmt.Sprint(u)})
				charged += perUser - rem["per-user"]
				if rem["global"] != 0 {
					t.Fatalf("global remaining %d, want 0", rem["global"])
				}
			}
			if total != global || charged != global {
				t.Fatalf("admitted %d, per-user rules charged %d; want both %d", total, charged, global)
			}
		})
	}
}

func testShadowRule(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	dark := counterRule("dark", floodgate.FixedWindow, 2, "user")
	dark.Shadow = true
	f := newFixture(t, store, "shadow-rule", nil, counterRule("enforce", floodgate.FixedWindow, 10, "user"), dark)
	x := floodgate.Attributes{"user": "x"}
	f.admit(x, 1)
	second := f.admit(x, 1)
	if second.ShadowDenied {
		t.Fatalf("2nd request: ShadowDenied with the shadow rule at its limit only now")
	}
	d := f.admit(x, 1)
	if !d.ShadowDenied || d.Reason != floodgate.ReasonNone || d.RetryAfter != 0 || d.Rule != "enforce" || d.Remaining != 7 {
		t.Fatalf("3rd request: %+v, want admitted by enforce with 7 left, ShadowDenied", d)
	}
	if r := ruleOf(t, d, "dark"); r.Allowed || !r.Shadow || r.Remaining != 0 || r.RetryAfter <= 0 {
		t.Fatalf("dark rule detail: %+v, want allowed:false shadow:true, 0 left, a retry time", r)
	}
	if tk := d.Ticket(); len(tk.Entries) != 1 || tk.Entries[0].Rule != "enforce" {
		t.Fatalf("3rd ticket %+v, want one entry, for enforce", tk)
	}
	// Refunding the 2nd request leaves the shadow rule one unit: so the 3rd
	// charged it nothing.
	f.refund(second)
	if got := f.remaining(x); got["enforce"] != 8 || got["dark"] != 1 {
		t.Fatalf("after refunding the 2nd request: remaining %v, want enforce 8, dark 1", got)
	}
}

func testShadowLimiter(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			f := newFixture(t, store, "shadow-limiter-"+alg.String(), &floodgate.Options{Shadow: true},
				counterRule("r", alg, 1, "user"))
			x := floodgate.Attributes{"user": "x"}
			first := f.admit(x, 1)
			d := f.admit(x, 1)
			if !d.ShadowDenied || d.Reason != floodgate.ReasonNone || d.RetryAfter != 0 || d.Never {
				t.Fatalf("2nd request to a dark limiter: %+v, want admitted, ShadowDenied", d)
			}
			if r := ruleOf(t, d, "r"); r.Allowed || !r.Shadow || r.Remaining != 0 {
				t.Fatalf("rule detail %+v, want allowed:false shadow:true, 0 left", r)
			}
			if d.Ticket().Valid() {
				t.Fatalf("a shadow denial charged nothing, yet its ticket is valid")
			}
			// A request past the limit charged nothing: one refund frees it all.
			f.refund(first)
			if got := f.remaining(x)["r"]; got != 1 {
				t.Fatalf("after refunding the only charged request: %d left, want 1", got)
			}
		})
	}
}

func testNever(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			f := newFixture(t, store, "never-"+alg.String(), nil,
				counterRule("slow", floodgate.FixedWindow, 100, "user"),
				counterRule("r", alg, 3, "user"))
			x := floodgate.Attributes{"user": "x"}
			f.admit(x, 1)
			for _, ask := range []func() floodgate.Outcome{
				func() floodgate.Outcome { return f.allow(x, 4) },
				func() floodgate.Outcome {
					d, err := f.lim.Decide(f.ctx, floodgate.ModePeek, x, 4)
					if err != nil {
						t.Fatal(err)
					}
					return d
				},
			} {
				d := ask()
				if d.Allowed || !d.Never || d.RetryAfter != 0 || d.Rule != "r" || d.Reason != floodgate.ReasonLimit {
					t.Fatalf("4 units against a capacity of 3: %+v, want denied, Never, no retry", d)
				}
				if r := ruleOf(t, d, "r"); !r.Never || r.RetryAfter != 0 {
					t.Fatalf("rule detail %+v, want Never", r)
				}
			}
			if got := f.remaining(x); got["r"] != 2 || got["slow"] != 99 {
				t.Fatalf("after Never denials: remaining %v, want r 2, slow 99", got)
			}
		})
	}
}

func testRefund(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	x := floodgate.Attributes{"user": "x"}
	t.Run("double", func(t *testing.T) {
		for _, alg := range algorithms {
			f := newFixture(t, store, "refund-twice-"+alg.String(), nil, counterRule("r", alg, 3, "user"))
			a := f.admit(x, 1)
			f.admit(x, 1)
			f.refund(a)
			f.refund(a)
			if got := f.remaining(x)["r"]; got != 2 {
				t.Fatalf("%s: one unit held after refunding the other twice: %d left, want 2", alg, got)
			}
		}
	})
	t.Run("fixed_window_rolled", func(t *testing.T) {
		f := newFixture(t, store, "refund-rolled", nil,
			floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Second, Align: floodgate.AlignClock, Key: []string{"user"}})
		f.clock.Advance(900 * time.Millisecond)
		old := f.admit(x, 2)
		f.clock.Advance(100 * time.Millisecond) // the next window
		f.admit(x, 1)
		f.refund(old)
		if got := f.remaining(x)["r"]; got != 2 {
			t.Fatalf("refund of the previous window: %d left, want 2", got)
		}
	})
	t.Run("sliding_window_bucket_left", func(t *testing.T) {
		f := newFixture(t, store, "refund-slid", nil,
			floodgate.Rule{Name: "r", Algorithm: floodgate.SlidingWindow, Limit: 4, Window: time.Second, Buckets: 4, Key: []string{"user"}})
		old := f.admit(x, 2)
		f.clock.Advance(250 * time.Millisecond)
		inWindow := f.admit(x, 1)
		f.clock.Advance(750 * time.Millisecond) // old's bucket has left
		f.admit(x, 2)
		f.refund(old)
		if got := f.remaining(x)["r"]; got != 1 {
			t.Fatalf("refund of a bucket that left the window: %d left, want 1", got)
		}
		f.refund(inWindow)
		if got := f.remaining(x)["r"]; got != 2 {
			t.Fatalf("refund of a bucket still in the window: %d left, want 2", got)
		}
	})
	t.Run("bucket_capped", func(t *testing.T) {
		for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			f := newFixture(t, store, "refund-cap-"+alg.String(), nil,
				floodgate.Rule{Name: "r", Algorithm: alg, Limit: 3, Window: time.Second, Key: []string{"user"}})
			d := f.admit(x, 2)
			f.clock.Advance(time.Second) // full again
			f.refund(d)
			f.admit(x, 3)
			if got := f.allow(x, 1); got.Allowed {
				t.Fatalf("%s: a refund to a full bucket overfilled it", alg)
			}
		}
	})
	t.Run("bucket_after_window", func(t *testing.T) {
		// Tokens go back only within one window of the charge, so a ticket
		// refunded again after its spent mark is forgotten changes nothing.
		for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			f := newFixture(t, store, "refund-late-"+alg.String(), nil,
				floodgate.Rule{Name: "r", Algorithm: alg, Limit: 3, Window: time.Second, Key: []string{"user"}})
			a := f.admit(x, 3)
			f.clock.Advance(500 * time.Millisecond)
			f.refund(a)
			f.clock.Advance(time.Second)
			b := f.admit(x, 3)
			f.clock.Advance(10 * time.Second)
			f.admit(x, 3) // full again, and drained
			f.refund(a)
			f.refund(b)
			if got := f.remaining(x)["r"]; got != 0 {
				t.Fatalf("%s: refunds of tickets a window old gave back tokens: %d left, want 0", alg, got)
			}
		}
	})
	t.Run("lease_then_rest", func(t *testing.T) {
		// Releasing the leases (LeaseTicket) leaves the rest of the
		// ticket refundable, once, and the other order works too.
		for _, leaseFirst := range []bool{true, false} {
			f := newFixture(t, store, fmt.Sprint("refund-lease-rest-", leaseFirst), nil,
				counterRule("c", floodgate.Concurrency, 2, "user"),
				floodgate.Rule{Name: "w", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Minute, Key: []string{"user"}})
			d := f.admit(x, 1)
			lt, t2 := d.LeaseTicket(), d.Ticket()
			if len(lt.Entries) != 1 || lt.Entries[0].Rule != "c" {
				t.Fatalf("LeaseTicket entries %+v, want the concurrency rule alone", lt.Entries)
			}
			first, second := lt, t2
			if !leaseFirst {
				first, second = t2, lt
			}
			for _, tk := range []floodgate.Ticket{first, second, t2} {
				if err := f.lim.Refund(f.ctx, tk); err != nil {
					t.Fatalf("Refund: %v", err)
				}
			}
			if got := f.remaining(x); got["c"] != 2 || got["w"] != 10 {
				t.Fatalf("lease first %v: after both refunds remaining %v, want c:2 w:10", leaseFirst, got)
			}
			f.admit(x, 1)
			if err := f.lim.Refund(f.ctx, t2); err != nil {
				t.Fatalf("Refund: %v", err)
			}
			if got := f.remaining(x); got["w"] != 9 {
				t.Fatalf("lease first %v: a spent ticket refunded again: remaining %v, want w:9", leaseFirst, got)
			}
		}
	})
	t.Run("lease_expired", func(t *testing.T) {
		f := newFixture(t, store, "refund-lease", nil, counterRule("r", floodgate.Concurrency, 2, "user"))
		a := f.admit(x, 1)
		f.clock.Advance(time.Minute) // a lapses
		f.admit(x, 2)
		f.refund(a)
		if got := f.remaining(x)["r"]; got != 0 {
			t.Fatalf("releasing a lapsed lease: %d left, want 0", got)
		}
	})
}

// testRecord pushes keys past their limits with Record: later requests are
// denied until the usage ages out, and the record itself reports a peek.
func testRecord(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	x := floodgate.Attributes{"user": "x"}
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			f := newFixture(t, store, "record-"+alg.String(), nil,
				floodgate.Rule{Name: "r", Algorithm: alg, Limit: 4, Window: time.Second, Key: []string{"user"}})
			f.admit(x, 1)
			d, err := f.lim.Decide(f.ctx, floodgate.ModeRecord, x, 7)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.Ticket().Valid() {
				t.Fatalf("after recording 8 units against a limit of 4: %+v, want denied, 0 left, a wait, no ticket", d)
			}
			wait := d.RetryAfter
			// The usage ages out within the window (tokens: 4 owed refill
			// in a second; leases lapse after it).
			if alg == floodgate.TokenBucket || alg == floodgate.GCRA {
				if wait != time.Second+250*time.Millisecond {
					t.Fatalf("8 units taken from a bucket of 4 at 4/s: wait %v, want 1.25s", wait)
				}
			} else if wait != time.Second {
				t.Fatalf("%s: wait %v, want the window, 1s", alg, wait)
			}
			f.clock.Advance(wait - time.Microsecond)
			if f.allow(x, 1).Allowed {
				t.Fatalf("admitted before the recorded usage aged out")
			}
			f.clock.Advance(time.Microsecond)
			f.admit(x, 1)
		})
	}
}

// calendarCase is one request to a calendar-aligned window.
type calendarCase struct {
	zone      string
	align     floodgate.Align
	at        string // local time, "2006-01-02 15:04:05.999999"; with a "Z" suffix, UTC
	wantReset time.Duration
}

func testCalendar(t *testing.T, newStore func(*testing.T) store.Store, zones []*time.Location) {
	loc := map[string]*time.Location{}
	for _, z := range zones {
		loc[z.String()] = z
	}
	day, month := floodgate.AlignDay, floodgate.AlignMonth
	cases := []calendarCase{
		// Days around the DST changes are 23 and 25 hours long.
		{"America/New_York", day, "2024-03-10 00:00:00", 23 * time.Hour},
		{"America/New_York", day, "2024-03-10 03:00:00", 21 * time.Hour},
		{"America/New_York", day, "2024-11-03 00:00:00", 25 * time.Hour},
		{"America/New_York", day, "2024-11-03 05:30:00Z", 23*time.Hour + 30*time.Minute}, // the first 1:30, EDT
		{"Europe/Berlin", day, "2024-03-31 00:00:00", 23 * time.Hour},
		{"Europe/Berlin", day, "2024-10-27 00:00:00", 25 * time.Hour},
		{"Europe/Berlin", day, "2024-02-29 12:00:00", 12 * time.Hour},
		{"Europe/Berlin", day, "2024-02-28 23:59:59.999999", time.Microsecond},
		{"UTC", day, "2024-12-31 18:00:00", 6 * time.Hour},
		// Chile changes clocks at midnight: 2024-09-08 has no midnight and
		// starts at 01:00; 2024-04-06 ends at the second midnight, 25h long.
		{"America/Santiago", day, "2024-09-07 12:00:00", 12 * time.Hour},
		{"America/Santiago", day, "2024-09-08 01:00:00", 23 * time.Hour},
		{"America/Santiago", day, "2024-04-06 00:00:00", 25 * time.Hour},
		{"America/Santiago", month, "2024-09-01 00:00:00", 30*24*time.Hour - time.Hour},
		// Months: a leap February, a March with the spring change, a year end.
		{"America/New_York", month, "2024-02-01 00:00:00", 29 * 24 * time.Hour},
		{"America/New_York", month, "2024-02-29 23:59:59.999999", time.Microsecond},
		{"America/New_York", month, "2024-03-01 00:00:00", 31*24*time.Hour - time.Hour},
		{"Europe/Berlin", month, "2024-10-31 12:00:00", 12 * time.Hour},
		{"Europe/Berlin", month, "2024-12-31 23:00:00", time.Hour},
		{"UTC", month, "2023-02-15 00:00:00", 14 * 24 * time.Hour},
	}
	for i, c := range cases {
		l := loc[c.zone]
		in := l
		if strings.HasSuffix(c.at, "Z") {
			in = time.UTC
		}
		at, err := time.ParseInLocation("2006-01-02 15:04:05.999999", strings.TrimSuffix(c.at, "Z"), in)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("calendar-%d", i)
		hr := harnessRule{
			spec: ruleSpec{name: "budget", alg: floodgate.FixedWindow, align: c.align, loc: l, window: int64(24 * time.Hour / time.Microsecond)},
			attr: "k", alts: []limits{{3, 3}},
		}
		h := newHarness(t, openStore(t, newStore), name, uint64(i), at, []harnessRule{hr}, false)
		attrs, keys := floodgate.Attributes{"k": "x"}, []string{"x"}
		d := h.consume(attrs, keys, 3)
		if d.ResetAfter != c.wantReset {
			t.Fatalf("%s %s %s: ResetAfter %v, want %v", c.zone, c.align, c.at, d.ResetAfter, c.wantReset)
		}
		d = h.consume(attrs, keys, 1)
		if d.Allowed || d.RetryAfter != c.wantReset {
			t.Fatalf("%s %s %s: past the budget: %+v, want denied until the window ends in %v", c.zone, c.align, c.at, d, c.wantReset)
		}
		h.probeRetry(attrs, keys, 3, d)
		// The next window is independent of the last (the model checks
		// where it ends).
		if d = h.consume(attrs, keys, 3); !d.Allowed {
			t.Fatalf("%s %s %s: the next window denied its budget: %+v", c.zone, c.align, c.at, d)
		}
	}
}

// testCalendarProperty plays random sequences against calendar windows in
// every zone, with steps of hours and days.
func testCalendarProperty(t *testing.T, newStore func(*testing.T) store.Store, cfg *config) {
	for i := range cfg.sequences / 3 {
		seed := cfg.seed + uint64(i)
		rng := newRand(seed, 3)
		align := floodgate.AlignDay + floodgate.Align(rng.IntN(2))
		hr := harnessRule{
			spec: ruleSpec{name: "budget", alg: floodgate.FixedWindow, align: align, loc: cfg.zones[rng.IntN(len(cfg.zones))], holds: rng.IntN(2) == 0},
			attr: "k",
		}
		hr.spec.window = int64(6 * time.Hour / time.Microsecond) // the harness's time step
		for range 2 {
			l := limitChoices[rng.IntN(len(limitChoices))]
			hr.alts = append(hr.alts, limits{l, l})
		}
		hr.dynamic = true
		// Start near a DST change or a month end now and then.
		start := startTime(rng)
		if rng.IntN(2) == 0 {
			start = []time.Time{
				time.Date(2024, 3, 9, 20, 0, 0, 0, time.UTC),
				time.Date(2024, 10, 26, 20, 0, 0, 0, time.UTC),
				time.Date(2024, 11, 2, 20, 0, 0, 0, time.UTC),
				time.Date(2024, 2, 27, 20, 0, 0, 0, time.UTC),
				time.Date(2023, 12, 30, 20, 0, 0, 0, time.UTC),
				time.Date(2024, 9, 7, 20, 0, 0, 0, time.UTC), // Chile: no midnight on the 8th
				time.Date(2024, 4, 6, 0, 0, 0, 0, time.UTC),  // Chile: two midnights
			}[rng.IntN(7)]
		}
		h := newHarness(t, openStore(t, newStore), fmt.Sprintf("calendar-prop-%d", seed), seed, start, []harnessRule{hr}, false)
		h.run(cfg.steps, 5)
	}
}

func testLimitChanges(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	x := floodgate.Attributes{"user": "x"}
	t.Run("limit_func", func(t *testing.T) {
		// Counting algorithms keep their count; how buckets carry their
		// level across a change is left to the property tests.
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.Concurrency} {
			limit := int64(10)
			r := counterRule("r", alg, 10, "user")
			r.LimitFunc = func(context.Context, floodgate.Attributes) (int64, error) { return limit, nil }
			f := newFixture(t, store, "limit-func-"+alg.String(), nil, r)
			f.admit(x, 6)
			limit = 5
			if d := f.allow(x, 1); d.Allowed || d.Remaining != 0 || d.Limit != 5 || d.RetryAfter <= 0 {
				t.Fatalf("%s: 6 used, limit lowered to 5: %+v, want denied, 0 left", alg, d)
			}
			limit = 20
			if d := f.admit(x, 1); d.Remaining != 13 || d.Limit != 20 {
				t.Fatalf("%s: 7 used, limit raised to 20: %+v, want 13 left", alg, d)
			}
			limit = 10
			if d := f.admit(x, 3); d.Remaining != 0 {
				t.Fatalf("%s: 10 used, limit back to 10: %+v, want 0 left", alg, d)
			}
			if d := f.allow(x, 1); d.Allowed {
				t.Fatalf("%s: 11th unit admitted under a limit of 10", alg)
			}
		}
	})
	t.Run("overrides", func(t *testing.T) {
		r := floodgate.Rule{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"user"},
			Overrides: []floodgate.Override{{Match: floodgate.Attributes{"plan": "pro"}, Limit: 5}}}
		f := newFixture(t, store, "overrides", nil, r)
		free, pro := floodgate.Attributes{"user": "x"}, floodgate.Attributes{"user": "x", "plan": "pro"}
		f.admit(free, 2)
		if f.allow(free, 1).Allowed {
			t.Fatal("3rd unit admitted on the free plan's limit of 2")
		}
		if d := f.admit(pro, 3); d.Remaining != 0 || d.Limit != 5 {
			t.Fatalf("upgraded to pro: %+v, want admitted, 0 of 5 left", d)
		}
		d := f.allow(free, 1)
		if d.Allowed || d.Remaining != 0 || d.RetryAfter != time.Minute {
			t.Fatalf("back to free with 5 used: %+v, want denied for the rest of the window", d)
		}
	})
	t.Run("token_bucket_burst_lowered", func(t *testing.T) {
		// Lowering the burst caps the tokens at once, fraction and all.
		limit := int64(10)
		r := floodgate.Rule{Name: "r", Algorithm: floodgate.TokenBucket, Limit: 10, Window: time.Second, Key: []string{"user"},
			LimitFunc: func(context.Context, floodgate.Attributes) (int64, error) { return limit, nil }}
		f := newFixture(t, store, "burst-lowered", nil, r)
		f.admit(x, 10)
		f.clock.Advance(630 * time.Millisecond)
		f.admit(x, 1) // 5.3 tokens left
		limit = 5     // burst 5: the bucket holds 5 tokens, not 5.3
		f.admit(x, 5)
		if d := f.allow(x, 1); d.Allowed || d.RetryAfter != 200*time.Millisecond {
			t.Fatalf("empty bucket refilling 5 a second: %+v, want denied for 200ms", d)
		}
	})
	t.Run("refund_after_limit_raised", func(t *testing.T) {
		// A ticket taken under a lower limit gives back its cost to the
		// key as it stands under the new one: no more, however the
		// limits compare.
		limit := int64(10)
		lf := func(context.Context, floodgate.Attributes) (int64, error) { return limit, nil }
		r := floodgate.Rule{Name: "r", Algorithm: floodgate.TokenBucket, Limit: 10, Window: time.Minute, Key: []string{"user"}, LimitFunc: lf}
		f := newFixture(t, store, "refund-raised-tb", nil, r)
		old := f.admit(x, 1) // 9 of 10 left
		limit = 100
		f.clock.Advance(30 * time.Second) // +50 at 100/min
		if d := f.admit(x, 20); d.Remaining != 39 {
			t.Fatalf("token bucket raised to 100: %d left, want 39", d.Remaining)
		}
		f.refund(old)
		if got := f.remaining(x)["r"]; got != 40 {
			t.Fatalf("token bucket: refund of a 1-unit ticket taken at 10/min: %d left, want 40", got)
		}

		limit = 50
		r = floodgate.Rule{Name: "r", Algorithm: floodgate.GCRA, Limit: 50, Window: time.Minute, Key: []string{"user"}, LimitFunc: lf}
		f = newFixture(t, store, "refund-raised-gcra", nil, r)
		old = f.admit(x, 1) // 1.2s of debt at 50/min
		limit = 60
		if d := f.admit(x, 58); d.Remaining != 0 { // 59.2 units of 60
			t.Fatalf("gcra raised to 60: %d left, want 0", d.Remaining)
		}
		f.refund(old)
		if got := f.remaining(x)["r"]; got != 1 {
			t.Fatalf("gcra: refund of a 1-unit ticket taken at 50/min to an exhausted key: %d left, want 1", got)
		}
	})
	t.Run("refund_after_limit_lowered", func(t *testing.T) {
		limit := int64(100)
		lf := func(context.Context, floodgate.Attributes) (int64, error) { return limit, nil }
		for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			limit = 100
			r := floodgate.Rule{Name: "r", Algorithm: alg, Limit: 100, Window: time.Minute, Key: []string{"user"}, LimitFunc: lf}
			f := newFixture(t, store, "refund-lowered-"+alg.String(), nil, r)
			old := f.admit(x, 30)
			limit = 10
			// Capped at 10 tokens; GCRA's 18s of debt are 3 units at 10/min.
			rest := f.remaining(x)["r"]
			if d := f.admit(x, rest); d.Remaining != 0 {
				t.Fatalf("%s: %d taken: %d left", alg, rest, d.Remaining)
			}
			f.refund(old)
			// A bucket gets its 30 tokens back, capped; a GCRA key the
			// 18s of debt the ticket took (3 units at 10/min), no more.
			want := map[floodgate.Algorithm]int64{floodgate.TokenBucket: 10, floodgate.GCRA: 3}[alg]
			if got := f.remaining(x)["r"]; got != want {
				t.Fatalf("%s: refund of 30 taken at 100/min to an exhausted key at 10/min: %d left, want %d", alg, got, want)
			}
		}
	})
	t.Run("peek_never_writes", func(t *testing.T) {
		// A peek (or a denial) under another limit reports the key under
		// that limit and leaves it as it was.
		limit := int64(10)
		lf := func(context.Context, floodgate.Attributes) (int64, error) { return limit, nil }
		for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			limit = 10
			r := floodgate.Rule{Name: "r", Algorithm: alg, Limit: 10, Window: 10 * time.Second, Key: []string{"user"}, LimitFunc: lf}
			f := newFixture(t, store, "peek-lowered-"+alg.String(), nil, r)
			f.admit(x, 2)
			f.clock.Advance(500 * time.Millisecond) // half a unit back
			limit = 4
			want := int64(4) // capped
			if alg == floodgate.GCRA {
				want = 3 // 1.5s of debt of 10s, 2.5s a unit
			}
			if got := f.remaining(x)["r"]; got != want {
				t.Fatalf("%s: 8.5 of 10 left, limit lowered to 4: peek %d, want %d", alg, got, want)
			}
			if d := f.allow(x, 5); d.Allowed || !d.Never {
				t.Fatalf("%s: 5 units under a capacity of 4: %+v, want never", alg, d)
			}
			f.clock.Advance(250 * time.Millisecond) // a quarter more
			limit = 3
			f.remaining(x)
			limit = 10
			if got := f.remaining(x)["r"]; got != 8 {
				t.Fatalf("%s: limit back to 10 after peeks at 4 and 3: %d left, want 8", alg, got)
			}
			if d := f.admit(x, 8); d.Remaining != 0 {
				t.Fatalf("%s: 8.75 of 10, 8 taken: %d left, want 0", alg, d.Remaining)
			}
			f.clock.Advance(250 * time.Millisecond) // whole again: 1.0
			if d := f.admit(x, 1); d.Remaining != 0 {
				t.Fatalf("%s: the peeks' fractions were kept: %d left, want 0", alg, d.Remaining)
			}
		}
	})
	t.Run("refund_after_override", func(t *testing.T) {
		// A refund gives back what the ticket took, under the limits it
		// was taken with, not the rule's base limits.
		for _, alg := range []floodgate.Algorithm{floodgate.TokenBucket, floodgate.GCRA} {
			r := floodgate.Rule{Name: "r", Algorithm: alg, Limit: 1, Window: time.Second, Key: []string{"user"},
				Overrides: []floodgate.Override{{Match: floodgate.Attributes{"plan": "pro"}, Limit: 100}}}
			f := newFixture(t, store, "refund-override-"+alg.String(), nil, r)
			pro := floodgate.Attributes{"user": "x", "plan": "pro"}
			f.admit(pro, 49)
			d := f.admit(pro, 1)
			f.refund(d)
			if got := f.remaining(pro)["r"]; got != 51 {
				t.Fatalf("%s: refunding 1 of 50 used: %d left, want 51", alg, got)
			}
		}
	})
}

func testKeys(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	t.Run("absent_attribute_skips", func(t *testing.T) {
		f := newFixture(t, store, "keys-skip", nil,
			counterRule("pair", floodgate.FixedWindow, 1, "a", "b"),
			counterRule("single", floodgate.FixedWindow, 1, "a"))
		d := f.admit(floodgate.Attributes{"a": "x"}, 1)
		if rs := d.Rules; len(rs) != 1 || rs[0].Name != "single" {
			t.Fatalf("request without b: rules %+v, want only single", rs)
		}
		d = f.admit(floodgate.Attributes{"b": "x", "a": ""}, 1)
		if len(d.Rules) != 0 || d.Rule != "" || d.Ticket().Valid() {
			t.Fatalf("request with an empty a and no rule applying: %+v, want admitted by no rule", d)
		}
	})
	t.Run("tuples_never_collide", func(t *testing.T) {
		f := newFixture(t, store, "keys-tuples", nil, counterRule("pair", floodgate.FixedWindow, 1, "a", "b"))
		tuples := [][2]string{
			{"x:y", "z"}, {"x", "y:z"}, {"x", "y"}, {"x:", "y"}, {"x", ":y"},
			{`x\`, "y"}, {"x", `\y`}, {`x\:`, "y"}, {"x", `\:y`}, {`x\`, ":y"},
			{"*", "*"}, {`\*`, "*"}, {"x:y:z", "w"}, {"x", "y:z:w"},
		}
		for _, tp := range tuples {
			f.admit(floodgate.Attributes{"a": tp[0], "b": tp[1]}, 1)
		}
		for _, tp := range tuples {
			if f.allow(floodgate.Attributes{"a": tp[0], "b": tp[1]}, 1).Allowed {
				t.Fatalf("tuple %q admitted twice under a limit of 1", tp)
			}
		}
	})
	t.Run("single_values_never_collide", func(t *testing.T) {
		f := newFixture(t, store, "keys-single", nil,
			counterRule("one", floodgate.FixedWindow, 1, "a"),
			floodgate.Rule{Name: "func", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Minute,
				KeyFunc: func(a floodgate.Attributes) string { return a["a"] }})
		for _, v := range []string{"*", `\*`, `\`, ":", "x"} {
			f.admit(floodgate.Attributes{"a": v}, 1)
		}
	})
	t.Run("limiters_and_rules_never_collide", func(t *testing.T) {
		a := newFixture(t, store, "a", nil, counterRule("b-c", floodgate.FixedWindow, 1, "k"))
		b := newFixture(t, store, "a-b", nil, counterRule("c", floodgate.FixedWindow, 1, "k"))
		c := newFixture(t, store, "keys-rules", nil,
			counterRule("r1", floodgate.FixedWindow, 1, "k"),
			counterRule("r2", floodgate.FixedWindow, 2, "k"))
		k := floodgate.Attributes{"k": "same"}
		a.admit(k, 1)
		b.admit(k, 1)
		d := c.admit(k, 1)
		if ruleOf(t, d, "r2").Remaining != 1 {
			t.Fatalf("rules of one limiter share a key's count: %+v", d.Rules)
		}
	})
	t.Run("global_key", func(t *testing.T) {
		f := newFixture(t, store, "keys-global", nil, counterRule("all", floodgate.FixedWindow, 2))
		f.admit(floodgate.Attributes{"user": "x"}, 1)
		f.admit(nil, 1)
		if f.allow(floodgate.Attributes{"user": "y"}, 1).Allowed {
			t.Fatal("a rule without key attributes counted requests apart")
		}
	})
}

func testReset(t *testing.T, newStore func(*testing.T) store.Store) {
	store := openStore(t, newStore)
	for _, alg := range algorithms {
		t.Run(alg.String(), func(t *testing.T) {
			f := newFixture(t, store, "reset-"+alg.String(), nil,
				counterRule("r", alg, 3, "user"),
				counterRule("global", floodgate.FixedWindow, 100))
			x, y := floodgate.Attributes{"user": "x"}, floodgate.Attributes{"user": "y"}
			f.admit(x, 3)
			f.admit(y, 3)
			if err := f.lim.Reset(f.ctx, x); err != nil {
				t.Fatal(err)
			}
			if got := f.remaining(x); got["r"] != 3 || got["global"] != 100 {
				t.Fatalf("after Reset(x): remaining %v, want r 3, global 100", got)
			}
			if got := f.remaining(y); got["r"] != 0 {
				t.Fatalf("Reset(x) touched y: %v", got)
			}
			if d := f.allow(x, 1); !d.Allowed || d.Remaining != 2 {
				t.Fatalf("after Reset(x): %+v, want admitted with 2 left", d)
			}
		})
	}
}
