package algo

import (
	"math/rand/v2"
	"testing"

	"github.com/floodgate-go/floodgate/store"
)

// budget is a reservable fixed window: limit units per window µs, aligned
// to the clock.
func budget(limit, window int64) Params {
	p := params(store.FixedWindow, limit, window)
	p.Align, p.Holds = store.AlignClock, true
	return p
}

// reserve checks units at now and holds them for id until until when they
// fit, as a store does; it returns the stamp, or -1 when denied.
func reserve(p *Params, s *State, now, units, until int64, id uint64) int64 {
	Normalize(p, s, now)
	if ok, _, _ := Check(p, s, now, units); !ok {
		return -1
	}
	return Hold(p, s, now, units, until, id)
}

// settle settles reservation id (0: the oldest hold) at now, as a store
// does.
func settle(p *Params, s *State, now, used, stamp int64, id uint64) (found, charged bool) {
	Normalize(p, s, now)
	return Settle(p, s, now, used, stamp, id)
}

// remaining is a peek's remaining units and retry for n at now.
func remaining(p *Params, s *State, now, n int64) (rem, retry int64) {
	c := clone(s)
	Normalize(p, &c, now)
	_, _, retry = Check(p, &c, now, n)
	rem, _ = Status(p, &c, now)
	return rem, retry
}

func TestHoldsCountUntilTheyLapse(t *testing.T) {
	p := budget(100, 1000)
	var s State
	if st := reserve(&p, &s, 0, 60, 300, 1); st != 0 {
		t.Fatalf("reserve 60 of 100: stamp %d, want the window start 0", st)
	}
	reserve(&p, &s, 10, 30, 2000, 2) // lapses with the window, at 1000
	if rem, retry := remaining(&p, &s, 20, 20); rem != 10 || retry != 280 {
		t.Fatalf("90 held: remaining %d, retry for 20 %dµs; want 10 left, 20 fit once the first hold lapses at 300", rem, retry)
	}
	if rem, retry := remaining(&p, &s, 20, 71); rem != 10 || retry != 980 {
		t.Fatalf("90 held: retry for 71 %dµs (remaining %d), want the window's end", retry, rem)
	}
	if rem, _ := remaining(&p, &s, 300, 1); rem != 70 {
		t.Fatalf("at 300 the first hold lapsed: remaining %d, want 70", rem)
	}
	Normalize(&p, &s, 300)
	if len(s.Leases) != 1 || s.B != 0 {
		t.Fatalf("normalized at 300: holds %+v, count %d; want the second hold alone, nothing charged", s.Leases, s.B)
	}
	if exp := Expiry(&p, &s, 300); exp != 1000 {
		t.Fatalf("a key holding units expires at %d, want its window's end 1000", exp)
	}
	if rem, _ := remaining(&p, &s, 1000, 1); rem != 100 {
		t.Fatalf("the next window: remaining %d, want 100", rem)
	}
}

func TestSettle(t *testing.T) {
	p := budget(100, 1000)
	var s State
	a := reserve(&p, &s, 0, 40, 5000, 1)
	reserve(&p, &s, 0, 40, 5000, 2)
	if found, charged := settle(&p, &s, 10, 55, a, 1); !found || !charged {
		t.Fatalf("settle of a live hold: found %v, charged %v", found, charged)
	}
	if rem, _ := remaining(&p, &s, 10, 1); rem != 5 {
		t.Fatalf("40 held, 55 used: remaining %d, want 5", rem)
	}
	if found, charged := settle(&p, &s, 20, 7, a, 1); found || !charged {
		t.Fatalf("a hold no longer there: found %v, charged %v; want the usage charged all the same", found, charged)
	}
	if rem, _ := remaining(&p, &s, 20, 1); rem != 0 {
		t.Fatalf("past the budget by an excess: remaining %d, want 0", rem)
	}
	// The oldest hold, without an id; none left: the usage alone.
	if found, _ := settle(&p, &s, 30, 1, 0, 0); !found || len(s.Leases) != 0 {
		t.Fatalf("settle of the oldest: found %v, holds left %+v", found, s.Leases)
	}
	if found, charged := settle(&p, &s, 30, 1, 0, 0); found || !charged || s.B != 64 {
		t.Fatalf("settle with no hold: found %v, charged %v, count %d; want 64 charged", found, charged, s.B)
	}
	// A settle after the window turned charges nothing.
	if found, charged := settle(&p, &s, 1000, 9, a, 2); found || charged || s.B != 0 {
		t.Fatalf("settle in the next window: found %v, charged %v, count %d", found, charged, s.B)
	}
}

// Holds lapsing together end oldest first: in the order they were taken.
func TestSettleOldestTakesTheFirstOfEquals(t *testing.T) {
	p := budget(100, 1000)
	var s State
	for id := uint64(1); id <= 3; id++ {
		reserve(&p, &s, int64(id), 10, 9999, id) // all lapse with the window
	}
	reserve(&p, &s, 4, 10, 500, 4) // lapses first
	for _, want := range []uint64{4, 1, 2} {
		if s.Leases[0].ID != want {
			t.Fatalf("oldest hold %d, want %d (holds %+v)", s.Leases[0].ID, want, s.Leases)
		}
		settle(&p, &s, 10, 0, 0, 0)
	}
}

// A rule without Holds ignores whatever State.Leases holds, and a hold
// that would lapse at once is not kept.
func TestHoldsOnlyWithHolds(t *testing.T) {
	p := budget(10, 1000)
	var s State
	reserve(&p, &s, 0, 5, 999, 1)
	reserve(&p, &s, 0, 5, 0, 2)
	if len(s.Leases) != 1 {
		t.Fatalf("holds %+v, want one: a hold lapsing at once is not kept", s.Leases)
	}
	p.Holds = false
	if rem, _ := remaining(&p, &s, 1, 1); rem != 10 {
		t.Fatalf("a rule without Holds counts holds: remaining %d, want 10", rem)
	}
}

// Holds never make a key expire while they live, nor a state from its
// expiry on answer other than an absent key; and the retry of a denial is
// exact: the units fit then, and not a µs sooner.
func TestHoldsExpiryAndRetry(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		p := budget(1+rng.Int64N(20), 1000*(1+rng.Int64N(20)))
		p.Align = store.Align(rng.IntN(2))
		var s State
		now := int64(1_000_000_000)
		for id := uint64(1); id < uint64(2+rng.IntN(8)); id++ {
			now += rng.Int64N(win(&p) / 2)
			n := 1 + rng.Int64N(p.Limit)
			switch rng.IntN(4) {
			case 0:
				step(&p, &s, now, n, rng.IntN(2) == 0)
			case 1:
				settle(&p, &s, now, rng.Int64N(p.Limit), s.A, uint64(rng.IntN(int(id))))
			default:
				reserve(&p, &s, now, n, now+1+rng.Int64N(2*win(&p)), id)
			}
		}
		Normalize(&p, &s, now)
		exp := Expiry(&p, &s, now)
		if len(s.Leases) > 0 && exp < s.Leases[len(s.Leases)-1].Exp {
			t.Fatalf("state expires at %d, while a hold lives until %d", exp, s.Leases[len(s.Leases)-1].Exp)
		}
		for _, at := range []int64{exp, exp + 1} {
			a, b := clone(&s), State{}
			Normalize(&p, &a, at)
			Normalize(&p, &b, at)
			ra, sa := Status(&p, &a, at)
			rb, sb := Status(&p, &b, at)
			if ra != rb || sa != sb {
				t.Fatalf("at expiry+%d: state answers (%d, %d), an absent key (%d, %d)", at-exp, ra, sa, rb, sb)
			}
		}
		n := 1 + rng.Int64N(p.Limit)
		if ok, _, retry := Check(&p, &s, now, n); !ok {
			if admitsAt(&p, &s, now+retry-1, n) || !admitsAt(&p, &s, now+retry, n) {
				t.Fatalf("retry %dµs for %d units is not the exact wait (holds %+v, count %d)", retry, n, s.Leases, s.B)
			}
		}
	}
}
