// Package algo holds the arithmetic of floodgate's five algorithms on a
// plain per-key state. Stores call it; it knows nothing about keys, locks or
// persistence.
//
// All times are integer microseconds since the Unix epoch and all durations
// integer microseconds, so every answer is exact and the Redis scripts (whose
// Lua numbers are doubles, exact to 2^53) can reproduce it bit for bit.
//
// A store evaluates one rule in these steps, holding whatever lock protects s:
//
//	v := s                            // a copy, unless InPlace(p.Algorithm)
//	Normalize(p, &v, now)             // bring the state to now
//	ok, never, retry := Check(p, &v, now, n)
//	if committing { Take(p, &v, now, n, lease); s = v }
//	remaining, reset := Status(p, &v, now)
//
// Normalizing a token bucket or a GCRA key applies the decision's limits to
// it (the refill rate, the capacity, the unit of a GCRA fraction), so a
// store keeps the normalized state only when the decision charges: a
// decision that charges nothing (a peek, a denial) writes nothing, and a
// later decision under other limits finds the key as the last charge left
// it. Windows and leases normalize by the clock alone (InPlace): their
// normalized state may always be kept.
//
// Give (a refund) is applied to the stored state without normalizing it,
// so a key held under limits other than the ticket's keeps its meaning and
// gets back exactly the units the ticket took.
//
// A FixedWindow rule with Params.Holds (a budget) also keeps the holds of
// reservations (see holds.go): they count as charged units until they are
// settled or lapse. They lapse by the clock alone, so Normalize drops the
// lapsed ones in place and a store keeps the holds of the state it
// normalized even when it keeps nothing else of it: a store normalizing a
// copy of the head gives the copy the stored Leases and stores the copy's
// back after every decision.
package algo

import (
	"time"

	"github.com/floodgate-go/floodgate/store"
)

// MaxUnits bounds the products the algorithms form (burst × window and the
// like) so that they stay exact in a double. Validation keeps parameters under
// it; debts from Record are clamped to it.
const MaxUnits = 1 << 53

// Params are one rule's parameters for one decision, in the port's one
// form. Times inside this package are µs; win gives the window in them.
type Params = store.Params

// win is p's window in µs.
func win(p *Params) int64 { return int64(p.Window / time.Microsecond) }

// Lease is one held concurrency slot group, or one hold of a reservation
// on a fixed window (see holds.go).
type Lease struct {
	ID  uint64
	N   int64 // slots (units) held
	Exp int64 // µs when it lapses if not released (settled)
}

// State is one key's state. The zero value is an absent key.
//
//	FixedWindow:   A = window start, B = count, C = window end; with
//	               Params.Holds, Leases = the reservations' holds, sorted
//	               by Exp (see holds.go)
//	SlidingWindow: A = newest bucket number, B = sum of Ring, Ring = per-bucket counts
//	TokenBucket:   A = whole tokens, B = fraction in 1/Window token units, C = last refill
//	GCRA:          A = theoretical arrival time (whole µs), B = remainder in 1/C µs,
//	               C = the Limit B was counted under; under another limit the
//	               arrival time is rounded up to a whole µs
//	Concurrency:   A = slots held, Leases = the leases, sorted by Exp
//
// So the kinds that are not InPlace keep all their state in Live, A, B
// and C, but for the holds of a fixed window that has them.
type State struct {
	Live    bool
	A, B, C int64
	Ring    []int64
	Leases  []Lease
}

// Reset makes s absent, keeping its buffers for reuse.
func (s *State) Reset() {
	s.Live = false
	s.A, s.B, s.C = 0, 0, 0
	clear(s.Ring)
	s.Leases = s.Leases[:0]
}

// InPlace reports whether Normalize of a key of kind k depends on the clock
// alone, so that a store may keep the normalized state without a charge:
// true for sliding windows and leases. Other kinds are normalized on a copy
// that is kept only when the decision charges (see the package doc).
func InPlace(k store.Algorithm) bool { return k == store.SlidingWindow || k == store.Concurrency }

// Normalize brings s to the time now under the limits of p.
func Normalize(p *Params, s *State, now int64) {
	switch p.Algorithm {
	case store.FixedWindow:
		if !s.Live || now >= s.C {
			start, end := windowAt(p, now)
			s.A, s.B, s.C, s.Live = start, 0, end, true
		}
		if p.Holds {
			dropLapsed(s, now)
		}
	case store.SlidingWindow:
		normSliding(p, s, now)
	case store.TokenBucket:
		normBucket(p, s, now)
	case store.GCRA:
		if !s.Live || s.A < now {
			s.A, s.B, s.Live = now, 0, true
		} else if s.C != p.Limit && s.B != 0 {
			s.A, s.B = s.A+1, 0
		}
		s.C = p.Limit
	case store.Concurrency:
		normLeases(s, now)
	}
}

// Check reports whether n units would be admitted now. When they would not,
// never says that no wait can help (n exceeds the capacity) and otherwise
// retry is the exact wait in µs after which the same n is admitted, assuming
// no other traffic. s must be normalized.
func Check(p *Params, s *State, now, n int64) (ok, never bool, retry int64) {
	switch p.Algorithm {
	case store.FixedWindow:
		if n > p.Limit {
			return false, true, 0
		}
		held := heldUnits(p, s)
		if s.B+held+n <= p.Limit {
			return true, false, 0
		}
		return false, false, holdsRetry(p, s, now, n, held)
	case store.SlidingWindow:
		return checkSliding(p, s, now, n)
	case store.TokenBucket:
		if n > p.Burst {
			return false, true, 0
		}
		if s.A >= n {
			return true, false, 0
		}
		need := (n-s.A)*win(p) - s.B
		return false, false, bucketLag(s, now) + ceilDiv(need, p.Limit)
	case store.GCRA:
		if n > p.Burst {
			return false, true, 0
		}
		over := gcraDebt(p, s, now) + n*win(p) - p.Burst*win(p)
		if over <= 0 {
			return true, false, 0
		}
		return false, false, ceilDiv(over, p.Limit)
	case store.Concurrency:
		return checkLeases(p, s, now, n)
	}
	return false, true, 0
}

// Take consumes n units (or adds a lease of n slots with the given id) without
// checking the limit: Record uses it directly, consume after Check. It
// returns the stamp a refund needs: the window start for FixedWindow, the
// bucket number for SlidingWindow, the time of the charge for TokenBucket
// and GCRA, 0 for Concurrency. s must be normalized.
func Take(p *Params, s *State, now, n int64, lease uint64) (stamp int64) {
	n = min(n, MaxUnits) // a larger charge means the same, and would overflow
	switch p.Algorithm {
	case store.FixedWindow:
		s.B = addClamped(s.B, n)
		return s.A
	case store.SlidingWindow:
		i := s.A % p.Buckets
		s.Ring[i] = addClamped(s.Ring[i], n)
		s.B = addClamped(s.B, n)
		return s.A
	case store.TokenBucket:
		s.A -= n
		// The floor is below 0 (validation keeps Burst×Window under
		// MaxUnits/4), so only a debt can reach it: its division is paid
		// only then.
		if s.A < 0 {
			if floor := p.Burst - MaxUnits/win(p); s.A < floor {
				s.A = floor
			}
		}
		return now
	case store.GCRA:
		d := min(gcraDebt(p, s, now)+min(n, MaxUnits/win(p)+p.Burst)*win(p), MaxUnits+p.Burst*win(p))
		s.A, s.B = now+d/p.Limit, d%p.Limit
		return now
	case store.Concurrency:
		addLease(s, Lease{ID: lease, N: n, Exp: now + win(p)})
	}
	return 0
}

// Give returns n units taken at stamp (or releases the lease with the given
// id). Units counted in a window that has since rolled are not returned, nor
// are tokens taken a whole Window ago or more (so a store need remember a
// spent ticket only that long).
//
// s is the stored state, normalized only if InPlace(p.Algorithm): a refund does
// not bring a token bucket or a GCRA key to now under the ticket's limits,
// which may no longer be the key's. A token bucket gets n tokens added to
// its count as of its last refill; the next decision refills it and caps it
// at that decision's burst, exactly as if the tokens had never been taken
// (refilling is linear, and the cap applies either way). A GCRA key's
// arrival time moves back, never before now, by the lesser of the time the
// ticket took (n emission intervals at p.Limit, the ticket's limit, in
// whole µs) and n units at the limit the key was last charged under
// (State.C). So a refund gives back at most its cost in units, capped at
// the capacity of the decision that next reads the key, and a GCRA refund
// at most the time it took as well.
func Give(p *Params, s *State, now, n, stamp int64, lease uint64) {
	n = min(n, MaxUnits)
	switch p.Algorithm {
	case store.FixedWindow:
		if s.Live && stamp == s.A && now < s.C {
			s.B = max(0, s.B-n)
		}
	case store.SlidingWindow:
		if stamp <= s.A && s.A-stamp < p.Buckets {
			i := stamp % p.Buckets
			d := min(n, s.Ring[i])
			s.Ring[i] -= d
			s.B -= d
		}
	case store.TokenBucket:
		if !s.Live || now-stamp >= win(p) {
			return
		}
		s.A = addClamped(s.A, n)
	case store.GCRA:
		if !s.Live || now-stamp >= win(p) || s.A < now {
			return
		}
		c := s.C
		if c <= 0 {
			c = p.Limit
		}
		n = min(n, MaxUnits/win(p))
		back := n * win(p) // n units at c, in 1/c µs
		if p.Limit > c {
			back = n * win(p) / p.Limit * c // the time taken, floored to µs
		}
		d := max(0, (s.A-now)*c+s.B-back)
		s.A, s.B = now+d/c, d%c
	case store.Concurrency:
		for i, l := range s.Leases {
			if l.ID == lease {
				s.Leases = append(s.Leases[:i], s.Leases[i+1:]...)
				s.A = sumLeases(s)
				break
			}
		}
	}
}

// Status reports the units left now and the µs until the full quota is back.
// s must be normalized.
func Status(p *Params, s *State, now int64) (remaining, reset int64) {
	switch p.Algorithm {
	case store.FixedWindow:
		held := heldUnits(p, s)
		if s.B == 0 && held == 0 && p.Align == store.AlignFirstHit {
			return p.Limit, 0
		}
		return max(0, p.Limit-s.B-held), s.C - now
	case store.SlidingWindow:
		return max(0, p.Limit-s.B), slidingReset(p, s, now)
	case store.TokenBucket:
		rem := min(max(0, s.A), p.Burst)
		if s.A >= p.Burst {
			return rem, 0
		}
		return rem, bucketLag(s, now) + ceilDiv((p.Burst-s.A)*win(p)-s.B, p.Limit)
	case store.GCRA:
		d := gcraDebt(p, s, now)
		return max(0, (p.Burst*win(p)-d)/win(p)), ceilDiv(d, p.Limit)
	case store.Concurrency:
		var reset int64
		if n := len(s.Leases); n > 0 {
			reset = s.Leases[n-1].Exp - now
		}
		return max(0, p.Limit-s.A), reset
	}
	return 0, 0
}

// Expiry is the instant (µs) from which s means the same as an absent key, so
// a store may forget it. It is never before now for a state holding anything.
func Expiry(p *Params, s *State, now int64) int64 {
	_, _, exp := StatusExpiry(p, s, now)
	return exp
}

// StatusExpiry is Status and Expiry in one pass, for stores that need both
// after every change: every kind but FixedWindow expires when its reset
// does, so the reset is computed once.
func StatusExpiry(p *Params, s *State, now int64) (remaining, reset, expiry int64) {
	remaining, reset = Status(p, s, now)
	switch {
	case p.Algorithm != store.FixedWindow:
		return remaining, reset, now + reset
	case s.B == 0 && heldUnits(p, s) == 0:
		return remaining, reset, now
	}
	return remaining, reset, s.C // a window holding anything lives to its end
}

// TicketLifetime is how long (µs) a store must remember a refunded ticket
// so that it is refunded at most once: as long as the window it was charged
// in can live (Give returns nothing once that has passed). A calendar day
// can last 25 hours and a month 31 days.
func TicketLifetime(p *Params) int64 {
	switch {
	case p.Algorithm == store.FixedWindow && p.Align == store.AlignDay:
		return 25 * 3600e6
	case p.Algorithm == store.FixedWindow && p.Align == store.AlignMonth:
		return 32 * 24 * 3600e6
	}
	return win(p)
}

// gcraDebt is how far the theoretical arrival time is ahead of now, in
// 1/Limit µs.
func gcraDebt(p *Params, s *State, now int64) int64 {
	if s.A < now {
		return 0
	}
	return (s.A-now)*p.Limit + s.B
}

// bucketLag is how far the clock stepped back behind the bucket's last
// refill: refilling resumes only once now passes it again.
func bucketLag(s *State, now int64) int64 { return max(0, s.C-now) }

func normBucket(p *Params, s *State, now int64) {
	if !s.Live {
		s.A, s.B, s.C, s.Live = p.Burst, 0, now, true
		return
	}
	if now <= s.C {
		if s.A >= p.Burst { // full, or the burst was lowered: drop any fraction
			s.A, s.B = p.Burst, 0
		}
		return
	}
	el := now - s.C
	s.C = now
	if s.A >= p.Burst {
		s.A, s.B = p.Burst, 0
		return
	}
	s.B = min(s.B, win(p)-1) // the window may have shrunk
	need := (p.Burst-s.A)*win(p) - s.B
	if el >= ceilDiv(need, p.Limit) {
		s.A, s.B = p.Burst, 0
		return
	}
	acc := s.B + el*p.Limit
	s.A += acc / win(p)
	s.B = acc % win(p)
}

// windowAt returns the fixed window [start, end) that holds now.
func windowAt(p *Params, now int64) (start, end int64) {
	switch p.Align {
	case store.AlignClock:
		start = floorDiv(now, win(p)) * win(p)
		return start, start + win(p)
	case store.AlignDay, store.AlignMonth:
		loc := p.Location
		if loc == nil {
			loc = time.UTC
		}
		y, m, d := time.UnixMicro(now).In(loc).Date()
		if p.Align == store.AlignDay {
			return startOfDay(y, m, d, loc), startOfDay(y, m, d+1, loc)
		}
		return startOfDay(y, m, 1, loc), startOfDay(y, m+1, 1, loc)
	default:
		return now, now + win(p)
	}
}

// WindowAt returns the fixed window [start, end) that a key with no window
// open gets at now. Stores that cannot read time zones where they evaluate
// the algorithm (Redis scripts) compute calendar windows with it.
func WindowAt(p *Params, now int64) (start, end int64) { return windowAt(p, now) }

// startOfDay is the first instant (µs) of the local day (y, m, d); d may run
// past the month's end. In zones that change clocks at midnight, midnight
// may not exist: time.Date then gives an instant an hour off, and the day
// starts where the clock change is.
func startOfDay(y int, m time.Month, d int, loc *time.Location) int64 {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if t.Hour() != 0 {
		start, end := t.ZoneBounds()
		if noon := time.Date(y, m, d, 12, 0, 0, 0, loc); t.YearDay() != noon.YearDay() {
			t = end // placed on the day before: the day starts when that zone ends
		} else {
			t = start // placed after the gap: the day starts when this zone begins
		}
	}
	return t.UnixMicro()
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func addClamped(a, b int64) int64 {
	if a > MaxUnits-b {
		return MaxUnits
	}
	return a + b
}

// StampAt is the stamp a charge made at now carries (see Take), when it
// does not depend on the key's state: the window start of a clock- or
// calendar-aligned fixed window, the sub-bucket number of a sliding
// window, now for token buckets and GCRA. A first-hit window starts where
// its key's first hit was, and a lease has no stamp: ok is false for them.
func StampAt(p *Params, now int64) (stamp int64, ok bool) {
	switch p.Algorithm {
	case store.FixedWindow:
		if p.Align == store.AlignFirstHit {
			return 0, false
		}
		start, _ := windowAt(p, now)
		return start, true
	case store.SlidingWindow:
		return floorDiv(now, win(p)/p.Buckets), true
	case store.TokenBucket, store.GCRA:
		return now, true
	}
	return 0, false
}
