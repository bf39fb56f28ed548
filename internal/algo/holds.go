package algo

import "github.com/floodgate-go/floodgate/store"

// Holds: a FixedWindow key of a rule with Params.Holds keeps, besides its
// count B, the holds of reservations in State.Leases: ID the reservation's
// ticket, N the units held, Exp when the hold lapses (its Until, or its
// window's end if sooner), sorted by Exp and, among holds that lapse
// together, in the order they were taken. The key counts B plus the units
// of its live holds: every check, status and expiry sees them. A key with
// no holds pays for them one look at len(Leases); a rule without Holds
// never looks.

// heldUnits is the units of s's holds (all live once s is normalized).
// Admissions keep their sum within the limit, so it cannot overflow.
func heldUnits(p *Params, s *State) int64 {
	if !p.Holds {
		return 0
	}
	var n int64
	for _, l := range s.Leases {
		n += l.N
	}
	return n
}

// holdsRetry is the wait until n units fit in a fixed window that counts
// held units as well as B: until enough holds lapse, first to lapse
// first, or else until the window ends.
func holdsRetry(p *Params, s *State, now, n, held int64) int64 {
	if held > 0 && s.B+n <= p.Limit {
		used := s.B + held
		for _, l := range s.Leases {
			if used -= l.N; used+n <= p.Limit {
				return l.Exp - now
			}
		}
	}
	return s.C - now
}

// Hold holds units for reservation id on a FixedWindow key with Holds,
// until until or its window's end if sooner, in place of a charge, and
// returns the stamp that settling it needs: the window's start. A hold
// that would lapse at once is not kept. s must be normalized and the
// units checked.
func Hold(p *Params, s *State, now, units, until int64, id uint64) (stamp int64) {
	if exp := min(until, s.C); p.Holds && exp > now {
		insertLease(s, Lease{ID: id, N: units, Exp: exp})
	}
	return s.A
}

// Settle ends a hold on a FixedWindow key with Holds and charges used, the
// units the reservation used, in its place: with id, the hold of that
// reservation, used being charged only while the key's window is the one
// the hold was taken in (stamp); without (id 0), the first hold to lapse,
// used being charged to the current window. A hold no longer there (it
// lapsed) charges used all the same. found reports that the hold was
// there; charged that used was charged, so the store keeps s as it keeps
// a charged state. s must be normalized.
func Settle(p *Params, s *State, now, used, stamp int64, id uint64) (found, charged bool) {
	if p.Algorithm != store.FixedWindow {
		return false, false
	}
	if p.Holds {
		for i, l := range s.Leases {
			if id == 0 || l.ID == id {
				s.Leases = append(s.Leases[:i], s.Leases[i+1:]...)
				found = true
				break
			}
		}
	}
	if id != 0 && stamp != s.A {
		return found, false
	}
	Take(p, s, now, used, 0)
	return found, true
}
