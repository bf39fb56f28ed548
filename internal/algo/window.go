package algo

// Sliding windows: the window is Buckets sub-buckets of Window/Buckets µs each,
// numbered from the Unix epoch. The window at time now is the bucket holding
// now and the Buckets-1 before it.

func normSliding(p *Params, s *State, now int64) {
	width := win(p) / p.Buckets
	cur := floorDiv(now, width)
	if int64(len(s.Ring)) != p.Buckets { // new key, or the rule changed shape
		if int64(cap(s.Ring)) >= p.Buckets {
			s.Ring = s.Ring[:p.Buckets]
			clear(s.Ring)
		} else {
			s.Ring = make([]int64, p.Buckets)
		}
		s.A, s.B, s.Live = cur, 0, true
		return
	}
	if !s.Live {
		clear(s.Ring)
		s.A, s.B, s.Live = cur, 0, true
		return
	}
	if cur <= s.A { // same bucket, or the clock stepped back: stay put
		return
	}
	if cur-s.A >= p.Buckets {
		clear(s.Ring)
		s.B = 0
	} else {
		for b := s.A + 1; b <= cur; b++ {
			i := b % p.Buckets
			s.B -= s.Ring[i]
			s.Ring[i] = 0
		}
	}
	s.A = cur
}

func checkSliding(p *Params, s *State, now, n int64) (ok, never bool, retry int64) {
	if n > p.Limit {
		return false, true, 0
	}
	if s.B+n <= p.Limit {
		return true, false, 0
	}
	// Walk the buckets from the oldest: bucket b leaves the window when bucket
	// b+Buckets opens.
	width := win(p) / p.Buckets
	sum := s.B
	for b := s.A - p.Buckets + 1; b <= s.A; b++ {
		sum -= s.Ring[floorMod(b, p.Buckets)]
		if sum+n <= p.Limit {
			return false, false, (b+p.Buckets)*width - now
		}
	}
	return false, false, (s.A+p.Buckets)*width - now // unreachable: n <= Limit
}

func slidingReset(p *Params, s *State, now int64) int64 {
	if s.B <= 0 {
		return 0
	}
	width := win(p) / p.Buckets
	for b := s.A; b > s.A-p.Buckets; b-- {
		if s.Ring[floorMod(b, p.Buckets)] != 0 {
			return (b+p.Buckets)*width - now
		}
	}
	return 0
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// Concurrency leases are kept sorted by expiry.

func normLeases(s *State, now int64) {
	s.Live = true
	if dropLapsed(s, now) {
		s.A = sumLeases(s)
	}
}

// dropLapsed drops the leases (or holds) lapsed at now, in place, and
// reports whether there were any.
func dropLapsed(s *State, now int64) bool {
	i := 0
	for i < len(s.Leases) && s.Leases[i].Exp <= now {
		i++
	}
	if i == 0 {
		return false
	}
	s.Leases = append(s.Leases[:0], s.Leases[i:]...)
	return true
}

// sumLeases is the slots held, saturating at MaxUnits: a clamped sum cannot
// be kept by subtraction.
func sumLeases(s *State) int64 {
	var n int64
	for _, l := range s.Leases {
		n = addClamped(n, l.N)
	}
	return n
}

func checkLeases(p *Params, s *State, now, n int64) (ok, never bool, retry int64) {
	if n > p.Limit {
		return false, true, 0
	}
	if s.A+n <= p.Limit {
		return true, false, 0
	}
	used := s.A
	for _, l := range s.Leases {
		used -= l.N
		if used+n <= p.Limit {
			return false, false, l.Exp - now
		}
	}
	return false, false, 0 // unreachable: n <= Limit
}

func addLease(s *State, l Lease) {
	s.A = addClamped(s.A, l.N)
	insertLease(s, l)
}

// insertLease adds l to s.Leases in Exp order, after the leases that lapse
// when it does.
func insertLease(s *State, l Lease) {
	i := len(s.Leases)
	s.Leases = append(s.Leases, l)
	for i > 0 && s.Leases[i-1].Exp > l.Exp {
		s.Leases[i] = s.Leases[i-1]
		i--
	}
	s.Leases[i] = l
}
