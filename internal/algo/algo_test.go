package algo

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/store"

	"github.com/floodgate-go/floodgate/internal/caltest"
)

// step is one store access: bring s to now, check n, and take n when
// admitted (or always, for a record).
func step(p *Params, s *State, now, n int64, record bool) (ok, never bool, retry int64) {
	Normalize(p, s, now)
	ok, never, retry = Check(p, s, now, n)
	if ok || record {
		Take(p, s, now, n, uint64(now)|1)
	}
	return ok, never, retry
}

// admitsAt reports whether n units would be admitted at now, leaving s as
// it was.
func admitsAt(p *Params, s *State, now, n int64) bool {
	c := clone(s)
	Normalize(p, &c, now)
	ok, _, _ := Check(p, &c, now, n)
	return ok
}

func clone(s *State) State {
	c := *s
	c.Ring = append([]int64(nil), s.Ring...)
	c.Leases = append([]Lease(nil), s.Leases...)
	return c
}

var kinds = []store.Algorithm{store.FixedWindow, store.SlidingWindow, store.TokenBucket, store.GCRA, store.Concurrency}

func params(k store.Algorithm, limit, window int64) Params {
	p := store.Params{Algorithm: k, Limit: limit, Window: us(window), Burst: limit}
	if k == store.SlidingWindow {
		p.Buckets = 10
	}
	return p
}

// The largest parameters validation allows keep every product exact: a
// drained bucket's retry is the exact rational wait, rounded up.
func TestExactNearMaxUnits(t *testing.T) {
	for _, k := range []store.Algorithm{store.TokenBucket, store.GCRA} {
		for _, c := range []struct{ limit, burst, window int64 }{
			{MaxUnits / 4 / 1_000_000, MaxUnits / 4 / 1_000_000, 1_000_000},
			{3, MaxUnits / 4 / 86_400_000_000, 86_400_000_000},
			{MaxUnits / 4 / 999_983, 7, 999_983},
			{1, MaxUnits / 4, 1},
		} {
			p := store.Params{Algorithm: k, Limit: c.limit, Window: us(c.window), Burst: c.burst}
			var s State
			const t0 int64 = 1_700_000_000_000_000
			if ok, _, _ := step(&p, &s, t0, c.burst, false); !ok {
				t.Fatalf("%v %+v: a full bucket denied its burst", k, c)
			}
			// The wait for the whole burst: burst×window/limit µs, rounded up.
			want := new(big.Int).Mul(big.NewInt(c.burst), big.NewInt(c.window))
			want.Add(want, big.NewInt(c.limit-1)).Div(want, big.NewInt(c.limit))
			_, _, retry := Check(&p, &s, t0, c.burst)
			if retry != want.Int64() {
				t.Fatalf("%v %+v: retry %d, want %d", k, c, retry, want)
			}
			if admitsAt(&p, &s, t0+retry-1, c.burst) || !admitsAt(&p, &s, t0+retry, c.burst) {
				t.Fatalf("%v %+v: the burst is not admitted exactly %dµs later", k, c, retry)
			}
			if _, reset := Status(&p, &s, t0); reset != retry {
				t.Fatalf("%v %+v: reset %d, want %d", k, c, reset, retry)
			}
		}
	}
	p := store.Params{Algorithm: store.FixedWindow, Limit: MaxUnits / 4, Window: us(1000)}
	var s State
	if ok, _, _ := step(&p, &s, 0, MaxUnits/4, false); !ok {
		t.Fatal("fixed window denied its whole limit")
	}
	if ok, never, retry := step(&p, &s, 1, 1, false); ok || never || retry != 999 {
		t.Fatalf("full fixed window: ok=%v never=%v retry=%d, want a wait of 999µs", ok, never, retry)
	}
}

// Recording a huge cost (a buggy or hostile caller) saturates the key; it
// must never wrap around and free it.
func TestRecordHugeCostSaturates(t *testing.T) {
	for _, k := range kinds {
		for _, n := range []int64{MaxUnits, math.MaxInt64 / 1000, math.MaxInt64} {
			p := params(k, 10, 1_000_000)
			var s State
			const t0 int64 = 1_000_000_000
			for i := range int64(3) {
				now := t0 + i
				step(&p, &s, now, n, true)
				Normalize(&p, &s, now)
				ok, never, retry := Check(&p, &s, now, 1)
				rem, reset := Status(&p, &s, now)
				if ok || never || retry <= 0 || rem != 0 || reset <= 0 {
					t.Errorf("%v after recording %d %d times: ok=%v never=%v retry=%d remaining=%d reset=%d; want denied, 0 left",
						k, n, i+1, ok, never, retry, rem, reset)
				}
				if exp := Expiry(&p, &s, now); exp < now+retry {
					t.Errorf("%v: state expires at %d, before the key admits again at %d", k, exp, now+retry)
				}
			}
		}
	}
}

// A lease recorded at a saturating size does not make its key looser when
// it lapses before others.
func TestConcurrencySaturatedLeaseLapses(t *testing.T) {
	p := store.Params{Algorithm: store.Concurrency, Limit: 10, Window: us(100)}
	var s State
	Normalize(&p, &s, 0)
	Take(&p, &s, 0, 3, 1)
	Take(&p, &s, 0, math.MaxInt64, 2)
	p.Window = us(1000)
	Take(&p, &s, 0, 4, 3)
	Normalize(&p, &s, 500) // the first two lapse
	if rem, _ := Status(&p, &s, 500); rem != 6 {
		t.Fatalf("one lease of 4 held: remaining %d, want 6", rem)
	}
}

// When the clock steps back, no algorithm admits more than it did, and a
// denial's retry stays the exact instant the request is admitted again.
func TestClockBackwards(t *testing.T) {
	for _, k := range kinds {
		p := params(k, 5, 1_000_000)
		var s State
		const t1 int64 = 10_000_000_000
		for i := range int64(4) {
			step(&p, &s, t1+i, 1, false)
		}
		before := clone(&s)
		for _, back := range []int64{1, 250_000, 999_999, 5_000_000} {
			now := t1 + 3 - back
			c := clone(&before)
			Normalize(&p, &c, now)
			ok, _, retry := Check(&p, &c, now, 2)
			if ok {
				t.Errorf("%v: %dµs back, 2 units admitted with 1 left", k, back)
				continue
			}
			if admitsAt(&p, &c, now+retry-1, 2) || !admitsAt(&p, &c, now+retry, 2) {
				t.Errorf("%v: %dµs back, retry %d is not exact", k, back, retry)
			}
			if _, reset := Status(&p, &c, now); Expiry(&p, &c, now) < now+reset || reset < retry {
				t.Errorf("%v: %dµs back, reset %d before retry %d or expiry early", k, back, reset, retry)
			}
			// Back at the original time the key means what it did.
			Normalize(&p, &c, t1+3)
			r1, s1 := Status(&p, &c, t1+3)
			b := clone(&before)
			Normalize(&p, &b, t1+3)
			r2, s2 := Status(&p, &b, t1+3)
			if r1 != r2 || s1 != s2 {
				t.Errorf("%v: a read %dµs in the past changed the key: (%d, %d), want (%d, %d)", k, back, r1, s1, r2, s2)
			}
		}
	}
}

// A token bucket whose burst is lowered holds at most the new burst, at once
// and afterwards; raised, it keeps its tokens and refills to the new one.
func TestTokenBucketBurstChanges(t *testing.T) {
	p := store.Params{Algorithm: store.TokenBucket, Limit: 10, Window: us(1_000_000), Burst: 10}
	var s State
	step(&p, &s, 0, 10, false)
	Normalize(&p, &s, 530_000) // 5.3 tokens
	if s.A != 5 || s.B == 0 {
		t.Fatalf("after 530ms: A=%d B=%d, want 5 and a fraction", s.A, s.B)
	}
	low := p
	low.Burst = 5
	Normalize(&low, &s, 530_000)
	if s.A != 5 || s.B != 0 {
		t.Fatalf("burst lowered to 5: A=%d B=%d, want exactly 5", s.A, s.B)
	}
	step(&low, &s, 530_000, 5, false)
	if _, _, retry := Check(&low, &s, 530_000, 1); retry != 100_000 {
		t.Fatalf("empty bucket at 10/s: retry %d, want 100ms", retry)
	}
	high := p
	high.Burst = 20
	Normalize(&high, &s, 1_030_000) // +5 tokens
	if rem, reset := Status(&high, &s, 1_030_000); rem != 5 || reset != 1_500_000 {
		t.Fatalf("burst raised to 20: (%d, %d), want 5 tokens and 1.5s to full", rem, reset)
	}
}

// Lowering a fixed or sliding window's limit below its count denies until
// the units age out; raising it admits at once. The count is untouched.
func TestCountingLimitChanges(t *testing.T) {
	for _, k := range []store.Algorithm{store.FixedWindow, store.SlidingWindow, store.Concurrency} {
		p := params(k, 10, 1_000_000)
		var s State
		for i := range int64(6) {
			step(&p, &s, i*1000, 1, false)
		}
		low := p
		low.Limit = 4
		Normalize(&low, &s, 6000)
		ok, _, retry := Check(&low, &s, 6000, 1)
		if rem, _ := Status(&low, &s, 6000); ok || rem != 0 {
			t.Errorf("%v: 6 held under a limit of 4: ok=%v remaining=%d", k, ok, rem)
		}
		if !admitsAt(&low, &s, 6000+retry, 1) || admitsAt(&low, &s, 6000+retry-1, 1) {
			t.Errorf("%v: retry %d not exact under the lowered limit", k, retry)
		}
		high := p
		high.Limit = 20
		Normalize(&high, &s, 6000)
		if rem, _ := Status(&high, &s, 6000); rem != 14 {
			t.Errorf("%v: 6 held under a limit of 20: remaining %d, want 14", k, rem)
		}
	}
}

// GCRA keeps its theoretical arrival time across a change of limit: the
// same µs of debt now weigh limit/window units each.
func TestGCRALimitChange(t *testing.T) {
	p := store.Params{Algorithm: store.GCRA, Limit: 10, Window: us(1_000_000), Burst: 10}
	var s State
	step(&p, &s, 0, 4, false) // 400ms of debt
	q := p
	q.Limit, q.Burst = 5, 5
	Normalize(&q, &s, 0)
	if rem, reset := Status(&q, &s, 0); rem != 3 || reset != 400_000 {
		t.Fatalf("400ms of debt at 5/s: (%d, %d), want 3 left (5 - 2) and 400ms", rem, reset)
	}
	// At 3/s two units leave 666666⅔µs of debt, a fraction in thirds of a
	// µs; under another limit it is rounded up to 666667µs, never read as
	// some other fraction.
	p = store.Params{Algorithm: store.GCRA, Limit: 3, Window: us(1_000_000), Burst: 3}
	s = State{}
	step(&p, &s, 0, 2, false)
	q = store.Params{Algorithm: store.GCRA, Limit: 1, Window: us(1_000_000), Burst: 3}
	Normalize(&q, &s, 0)
	if _, reset := Status(&q, &s, 0); reset != 666_667 {
		t.Fatalf("debt of 666666⅔µs under a new limit: reset %d, want 666667", reset)
	}
}

// A sliding window refund returns units only to a bucket still in the
// window, and never more than the bucket holds.
func TestSlidingRefunds(t *testing.T) {
	p := store.Params{Algorithm: store.SlidingWindow, Limit: 10, Window: us(1000), Buckets: 4} // 250µs buckets
	var s State
	Normalize(&p, &s, 0)
	old := Take(&p, &s, 0, 3, 1) // bucket 0
	Normalize(&p, &s, 250)
	mid := Take(&p, &s, 250, 2, 2) // bucket 1
	Normalize(&p, &s, 1000)        // bucket 4: bucket 0 has left
	cur := Take(&p, &s, 1000, 4, 3)
	if old != 0 || mid != 1 || cur != 4 {
		t.Fatalf("stamps %d %d %d, want bucket numbers 0 1 4", old, mid, cur)
	}
	Give(&p, &s, 1000, 3, old, 1) // its slot now holds bucket 4
	if rem, _ := Status(&p, &s, 1000); rem != 4 {
		t.Fatalf("refund to a bucket that left: remaining %d, want 4", rem)
	}
	Give(&p, &s, 1000, 5, mid, 2) // more than it holds
	if rem, _ := Status(&p, &s, 1000); rem != 6 {
		t.Fatalf("refund of 5 to a bucket of 2: remaining %d, want 6", rem)
	}
	Give(&p, &s, 1000, 1, 9, 4) // a bucket not yet open
	if rem, _ := Status(&p, &s, 1000); rem != 6 || s.B != 4 {
		t.Fatalf("refund to a future bucket: remaining %d, sum %d", rem, s.B)
	}
}

// Buckets give tokens back only within one window of the charge.
func TestBucketRefundHorizon(t *testing.T) {
	for _, k := range []store.Algorithm{store.TokenBucket, store.GCRA} {
		p := store.Params{Algorithm: k, Limit: 4, Window: us(1000), Burst: 4}
		var s State
		Normalize(&p, &s, 0)
		stamp := Take(&p, &s, 0, 4, 1)
		Normalize(&p, &s, 999)
		Take(&p, &s, 999, 3, 2)
		late := clone(&s)
		Give(&p, &s, 999, 4, stamp, 1)
		if rem, _ := Status(&p, &s, 999); rem != 4 {
			t.Errorf("%v: refund 1µs inside the window: %d left, want 4", k, rem)
		}
		Normalize(&p, &late, 1000)
		before, _ := Status(&p, &late, 1000)
		Give(&p, &late, 1000, 4, stamp, 1)
		if rem, _ := Status(&p, &late, 1000); rem != before {
			t.Errorf("%v: refund a whole window after the charge: %d left, want %d", k, rem, before)
		}
	}
}

func TestCalendarWindows(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		align store.Align
		loc   *time.Location
		at    time.Time
		len   time.Duration
	}{
		{store.AlignDay, ny, time.Date(2024, 3, 10, 12, 0, 0, 0, ny), 23 * time.Hour},
		{store.AlignDay, ny, time.Date(2024, 11, 3, 12, 0, 0, 0, ny), 25 * time.Hour},
		{store.AlignDay, nil, time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), 24 * time.Hour},
		{store.AlignMonth, ny, time.Date(2024, 2, 10, 0, 0, 0, 0, ny), 29 * 24 * time.Hour},
		{store.AlignMonth, ny, time.Date(2024, 3, 31, 23, 0, 0, 0, ny), 31*24*time.Hour - time.Hour},
		{store.AlignMonth, nil, time.Date(2023, 12, 31, 23, 0, 0, 0, time.UTC), 31 * 24 * time.Hour},
	} {
		p := store.Params{Algorithm: store.FixedWindow, Limit: 1, Align: c.align, Location: c.loc}
		start, end := windowAt(&p, c.at.UnixMicro())
		if got := time.Duration(end-start) * time.Microsecond; got != c.len || start > c.at.UnixMicro() || end <= c.at.UnixMicro() {
			t.Errorf("%v window at %v: [%v, %v) of %v, want %v long around it", c.align, c.at,
				time.UnixMicro(start).In(c.at.Location()), time.UnixMicro(end).In(c.at.Location()), got, c.len)
		}
	}
}

// Calendar windows are exactly the spans of one local date (or month), also
// in zones whose clocks change at midnight, where midnight may not exist
// (Santiago, Havana, Asunción) or may come twice (Beirut).
func TestCalendarWindowsFollowLocalDates(t *testing.T) {
	for _, zone := range []string{"America/Santiago", "America/Havana", "America/Asuncion", "Asia/Beirut",
		"Pacific/Apia", "Australia/Lord_Howe", "America/New_York", "Europe/Berlin", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Skip(err)
		}
		for day := time.Date(2015, 1, 1, 7, 0, 0, 0, time.UTC); day.Year() < 2017; day = day.Add(24*time.Hour + 17*time.Minute) {
			now := day.UnixMicro()
			for _, align := range []store.Align{store.AlignDay, store.AlignMonth} {
				p := store.Params{Algorithm: store.FixedWindow, Limit: 1, Align: align, Location: loc}
				start, end := WindowAt(&p, now)
				wantStart, wantEnd := caltest.Window(now, loc, align == store.AlignMonth)
				if start != wantStart || end != wantEnd {
					t.Fatalf("%s %v window at %v: [%v, %v), want [%v, %v)", zone, align, day.In(loc),
						time.UnixMicro(start).In(loc), time.UnixMicro(end).In(loc),
						time.UnixMicro(wantStart).In(loc), time.UnixMicro(wantEnd).In(loc))
				}
			}
		}
	}
}

// From its Expiry on, a state means the same as an absent key, so a store
// may forget it then; and it never expires while it holds anything.
func TestExpiryMeansAbsent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, k := range kinds {
		for range 200 {
			p := params(k, 1+rng.Int64N(10), 1000*(1+rng.Int64N(100)))
			if k == store.FixedWindow {
				p.Align = store.Align(rng.IntN(2))
			}
			var s State
			now := int64(1_000_000_000)
			for range 1 + rng.IntN(8) {
				now += rng.Int64N(win(&p))
				step(&p, &s, now, 1+rng.Int64N(p.Limit), rng.IntN(4) == 0)
			}
			exp := Expiry(&p, &s, now)
			if exp < now {
				t.Fatalf("%v: expiry %d before now %d", k, exp, now)
			}
			var fresh State
			for _, at := range []int64{exp, exp + 1, exp + win(&p)} {
				a, b := clone(&s), fresh
				Normalize(&p, &a, at)
				Normalize(&p, &b, at)
				ra, sa := Status(&p, &a, at)
				rb, sb := Status(&p, &b, at)
				oka, _, _ := Check(&p, &a, at, p.Limit)
				okb, _, _ := Check(&p, &b, at, p.Limit)
				if ra != rb || sa != sb || oka != okb {
					t.Fatalf("%v at expiry+%d: state answers (%d, %d, %v), an absent key (%d, %d, %v)",
						k, at-exp, ra, sa, oka, rb, sb, okb)
				}
			}
		}
	}
}

// A refunded ticket must be remembered as long as its window can last: for
// calendar windows that is the longest day (25 h at a DST change) and the
// longest month in any zone.
func TestTicketLifetimeCoversTheWindow(t *testing.T) {
	for _, zone := range []string{"UTC", "America/New_York", "Europe/Berlin", "America/Santiago", "Australia/Lord_Howe"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		for _, align := range []store.Align{store.AlignDay, store.AlignMonth} {
			p := store.Params{Algorithm: store.FixedWindow, Limit: 1, Align: align, Location: loc}
			life := TicketLifetime(&p)
			for d := time.Date(2027, 1, 1, 12, 0, 0, 0, loc); d.Year() == 2027; d = d.AddDate(0, 0, 1) {
				if start, end := WindowAt(&p, d.UnixMicro()); end-start > life {
					t.Fatalf("%s %v window at %v lasts %v, longer than the ticket lifetime %v",
						zone, align, d, time.Duration(end-start)*time.Microsecond, time.Duration(life)*time.Microsecond)
				}
			}
		}
	}
	for _, k := range []store.Algorithm{store.FixedWindow, store.SlidingWindow, store.TokenBucket, store.GCRA, store.Concurrency} {
		if p := (store.Params{Algorithm: k, Window: us(90e6)}); TicketLifetime(&p) != 90e6 {
			t.Errorf("%v: ticket lifetime %d, want the window 90e6", k, TicketLifetime(&p))
		}
	}
}

// us is n microseconds.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
