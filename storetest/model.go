package storetest

import (
	"math/big"
	"sort"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/caltest"
)

// The reference model: a deliberately plain restatement of what each
// algorithm means, written without internal/algo. Times are integer
// microseconds since the Unix epoch. Token bucket and GCRA state are exact
// rationals; sliding windows keep a map from bucket number to units; leases
// are a list; calendar windows are found by searching for the instants where
// the local date changes.
//
// Conventions every store must share with the model (they are the contract
// stated in internal/algo):
//
//   - A decision reads a key brought to its time with its parameters; only
//     a decision that writes (a charged consume, a record) keeps the key so
//     brought. A peek or a decision that charges nothing leaves the key as
//     its last write left it. Only token buckets and GCRA can tell: tokens
//     refill at the rate in force at the write that observes them, and a
//     GCRA key keeps its theoretical arrival time across a change of
//     limit, rounded up to a whole µs (stores count its fraction in
//     1/limit µs).
//   - A refund gives back its cost to the key as it stands, not brought to
//     the present under the ticket's limits: a token bucket gets the
//     tokens added to its count as of its last refill (the next decision
//     caps it at its burst), a GCRA key's arrival time moves back, never
//     before the present, by the lesser of the cost at the limit of its
//     last write and the time the ticket took (whole µs).
//     Refunds apply only within one window of the charge (windows: while
//     the window or bucket it was counted in is current; leases: while the
//     lease holds). Stores remember spent tickets that long and no longer.
//   - A key whose state, after a write, means "nothing held" is absent: an
//     empty fixed window (the next hit of a first-hit window opens a new
//     one), an empty sliding window, a full token bucket (full at whatever
//     burst applies next), a GCRA key whose theoretical arrival time has
//     passed, a key with no live leases.
//   - A reservable fixed window (Rule.Reservable) counts its charged units
//     and the units of its live holds. A hold lapses at its Until or its
//     window's end, whichever comes first, by the clock alone. A
//     reservation is a write: a first-hit window it opens lives to its
//     end, like one a charge opens, even once its holds have lapsed. A
//     denied reservation's retry is the time until enough holds lapse
//     (first to lapse first), or else until the window ends; its reset,
//     while it counts or holds anything, is the window's end.
//   - Settling a reservation ends its hold (if still live) and charges the
//     units used while the window it was taken in is current, once per
//     ticket; settling without a ticket ends the key's first hold to lapse
//     (among holds lapsing together, the first taken) and charges the
//     current window. A settle that charges is a write. Stores remember
//     settled tickets at least as long as refunded ones; the suite never
//     settles a ticket again once that time has passed since the first
//     settlement.

// ruleSpec is what the model needs to know of a rule that cannot change
// between decisions.
type ruleSpec struct {
	name    string
	alg     floodgate.Algorithm
	window  int64 // µs: the window, or the lease lifetime
	buckets int64 // sliding window sub-buckets
	align   floodgate.Align
	loc     *time.Location
	shadow  bool
	holds   bool // Rule.Reservable (fixed windows)
}

// limits are the parameters of one decision that may change between
// decisions (overrides and limit functions).
type limits struct{ limit, burst int64 }

// ruleModel is one rule's state across keys.
type ruleModel struct {
	ruleSpec
	keys map[string]*keyState
}

// keyState is one key's state; which fields are used depends on the
// algorithm.
type keyState struct {
	start, end, count int64 // fixed window [start, end) holding count

	counts map[int64]int64 // sliding window: bucket number → units

	tokens *big.Rat // token bucket: tokens as of last
	last   int64

	tat      *big.Rat // gcra: theoretical arrival time, µs
	tatLimit int64    // gcra: the limit of the last access

	leases []lease // concurrency

	holds []lease // reservable fixed window: the reservations' holds, in the order taken
}

type lease struct{ id, n, exp int64 }

// ruleResult is what one rule answers, durations in µs.
type ruleResult struct {
	allowed, never          bool
	remaining, reset, retry int64
}

func newRuleModel(s ruleSpec) *ruleModel {
	return &ruleModel{ruleSpec: s, keys: map[string]*keyState{}}
}

// width is the width of a sliding window bucket, µs.
func (m *ruleModel) width() int64 { return m.window / m.buckets }

// at returns the key's state brought to now under p, nil when absent. It
// is a copy: the model's state changes only when a write keeps it (see
// create).
func (m *ruleModel) at(key string, now int64, p limits) *keyState {
	s := m.keys[key]
	if s == nil {
		return nil
	}
	return m.bring(s.clone(), now, p)
}

// bring brings s to now under p, in place, and returns it (nil when it
// means absent).
func (m *ruleModel) bring(s *keyState, now int64, p limits) *keyState {
	switch m.alg {
	case floodgate.FixedWindow:
		if now >= s.end {
			return nil
		}
		live := s.holds[:0]
		for _, h := range s.holds {
			if h.exp > now {
				live = append(live, h)
			}
		}
		s.holds = live
	case floodgate.SlidingWindow:
		oldest := floorDiv(now, m.width()) - m.buckets + 1
		for b := range s.counts {
			if b < oldest {
				delete(s.counts, b)
			}
		}
	case floodgate.TokenBucket:
		if now > s.last {
			refill := ratio(now-s.last, p.limit, m.window)
			s.tokens.Add(s.tokens, refill)
			s.last = now
		}
		if full := big.NewRat(p.burst, 1); s.tokens.Cmp(full) > 0 {
			s.tokens = full
		}
	case floodgate.GCRA:
		// Stores keep the arrival time's fraction in 1/limit µs: under a
		// new limit it is rounded up to a whole µs.
		if s.tatLimit != p.limit && !s.tat.IsInt() {
			s.tat = big.NewRat(ceilRat(s.tat), 1)
		}
		s.tatLimit = p.limit
	case floodgate.Concurrency:
		live := s.leases[:0]
		for _, l := range s.leases {
			if l.exp > now {
				live = append(live, l)
			}
		}
		s.leases = live
	}
	return s
}

// clone is a deep copy of s.
func (s *keyState) clone() *keyState {
	c := *s
	if s.counts != nil {
		c.counts = make(map[int64]int64, len(s.counts))
		for b, n := range s.counts {
			c.counts[b] = n
		}
	}
	if s.tokens != nil {
		c.tokens = new(big.Rat).Set(s.tokens)
	}
	if s.tat != nil {
		c.tat = new(big.Rat).Set(s.tat)
	}
	c.leases = append([]lease(nil), s.leases...)
	c.holds = append([]lease(nil), s.holds...)
	return &c
}

// create returns the key's state brought to now under p and kept (a
// write), making an empty one at now if absent.
func (m *ruleModel) create(key string, now int64, p limits) *keyState {
	if s := m.keys[key]; s != nil {
		if s = m.bring(s, now, p); s != nil {
			return s
		}
	}
	s := &keyState{}
	switch m.alg {
	case floodgate.FixedWindow:
		s.start, s.end = m.windowAt(now)
	case floodgate.SlidingWindow:
		s.counts = map[int64]int64{}
	case floodgate.TokenBucket:
		s.tokens, s.last = big.NewRat(p.burst, 1), now
	case floodgate.GCRA:
		s.tat, s.tatLimit = big.NewRat(now, 1), p.limit
	}
	m.keys[key] = s
	return s
}

// windowAt is the fixed window holding now for a key with no window open.
func (m *ruleModel) windowAt(now int64) (start, end int64) {
	switch m.align {
	case floodgate.AlignClock:
		start = floorDiv(now, m.window) * m.window
		return start, start + m.window
	case floodgate.AlignDay:
		return caltest.Window(now, m.loc, false)
	case floodgate.AlignMonth:
		return caltest.Window(now, m.loc, true)
	}
	return now, now + m.window
}

// slidingSum is the units in the window at bucket cur, counting only
// buckets after after.
func (m *ruleModel) slidingSum(s *keyState, cur, after int64) int64 {
	var sum int64
	if s == nil {
		return 0
	}
	for b, n := range s.counts {
		if b > cur-m.buckets && b <= cur && b > after {
			sum += n
		}
	}
	return sum
}

// check answers whether n units would be admitted now. s is the key's state
// brought to now (nil when absent).
func (m *ruleModel) check(s *keyState, now, n int64, p limits) ruleResult {
	switch m.alg {
	case floodgate.FixedWindow:
		if n > p.limit {
			return ruleResult{never: true}
		}
		if s == nil || s.count+held(s.holds, 0)+n <= p.limit {
			return ruleResult{allowed: true}
		}
		if s.count+n <= p.limit {
			// Enough holds lapse before the window ends.
			for _, e := range expiries(s.holds) {
				if s.count+held(s.holds, e)+n <= p.limit {
					return ruleResult{retry: e - now}
				}
			}
		}
		return ruleResult{retry: s.end - now}
	case floodgate.SlidingWindow:
		if n > p.limit {
			return ruleResult{never: true}
		}
		cur := floorDiv(now, m.width())
		if m.slidingSum(s, cur, cur-m.buckets)+n <= p.limit {
			return ruleResult{allowed: true}
		}
		// Try each later bucket boundary; bucket k opens at k*width.
		for k := cur + 1; k <= cur+m.buckets; k++ {
			if m.slidingSum(s, cur, k-m.buckets)+n <= p.limit {
				return ruleResult{retry: k*m.width() - now}
			}
		}
		panic("storetest: sliding window model found no retry time")
	case floodgate.TokenBucket:
		if n > p.burst {
			return ruleResult{never: true}
		}
		if s == nil || s.tokens.Cmp(big.NewRat(n, 1)) >= 0 {
			return ruleResult{allowed: true}
		}
		// (n - tokens) × window / limit, rounded up.
		short := new(big.Rat).Sub(big.NewRat(n, 1), s.tokens)
		return ruleResult{retry: ceilRat(short.Mul(short, big.NewRat(m.window, p.limit)))}
	case floodgate.GCRA:
		if n > p.burst {
			return ruleResult{never: true}
		}
		// Admitted when debt + n×window/limit ≤ burst×window/limit, the debt
		// being how far the arrival time is ahead of now.
		over := new(big.Rat).Add(gcraDebt(s, now), ratio(n-p.burst, m.window, p.limit))
		if over.Sign() <= 0 {
			return ruleResult{allowed: true}
		}
		return ruleResult{retry: ceilRat(over)}
	case floodgate.Concurrency:
		if n > p.limit {
			return ruleResult{never: true}
		}
		if leased(s, 0)+n <= p.limit {
			return ruleResult{allowed: true}
		}
		for _, e := range expiries(s.leases) {
			if leased(s, e)+n <= p.limit {
				return ruleResult{retry: e - now}
			}
		}
		panic("storetest: concurrency model found no retry time")
	}
	panic("storetest: unknown algorithm")
}

// expiries are the expiries of ls, in time order.
func expiries(ls []lease) []int64 {
	exps := make([]int64, 0, len(ls))
	for _, l := range ls {
		exps = append(exps, l.exp)
	}
	sort.Slice(exps, func(i, j int) bool { return exps[i] < exps[j] })
	return exps
}

// leased is the slots of s's leases that outlive t.
func leased(s *keyState, t int64) int64 {
	if s == nil {
		return 0
	}
	return held(s.leases, t)
}

// held is the units of ls that outlive t.
func held(ls []lease, t int64) int64 {
	var n int64
	for _, l := range ls {
		if l.exp > t {
			n += l.n
		}
	}
	return n
}

// gcraDebt is how far s's arrival time is ahead of now, µs (never negative).
func gcraDebt(s *keyState, now int64) *big.Rat {
	d := new(big.Rat)
	if s != nil {
		d.Sub(s.tat, big.NewRat(now, 1))
	}
	if d.Sign() < 0 {
		d.SetInt64(0)
	}
	return d
}

// take charges n units (a lease of n slots named id) and returns the stamp a
// refund needs: the window start, the bucket number, or the charge time.
func (m *ruleModel) take(key string, now, n, id int64, p limits) int64 {
	s := m.create(key, now, p)
	switch m.alg {
	case floodgate.FixedWindow:
		s.count += n
		return s.start
	case floodgate.SlidingWindow:
		cur := floorDiv(now, m.width())
		s.counts[cur] += n
		return cur
	case floodgate.TokenBucket:
		s.tokens.Sub(s.tokens, big.NewRat(n, 1))
		return now
	case floodgate.GCRA:
		t := new(big.Rat).Add(big.NewRat(now, 1), gcraDebt(s, now))
		s.tat = t.Add(t, ratio(n, m.window, p.limit))
		return now
	case floodgate.Concurrency:
		s.leases = append(s.leases, lease{id: id, n: n, exp: now + m.window})
	}
	return 0
}

// hold holds n units for reservation id until until (or the window's end,
// if sooner) in place of a charge, and returns the window start.
func (m *ruleModel) hold(key string, now, n, until, id int64, p limits) int64 {
	s := m.create(key, now, p)
	if exp := min(until, s.end); exp > now {
		s.holds = append(s.holds, lease{id: id, n: n, exp: exp})
	}
	return s.start
}

// settle ends the hold of reservation id (id 0: the first to lapse) on the
// key, and charges used in its place: with an id only while the window
// that started at stamp is current. It reports whether the hold was live.
func (m *ruleModel) settle(key string, now, used, stamp, id int64, p limits) bool {
	s := m.keys[key]
	if s != nil {
		s = m.bring(s, now, p) // holds lapse by the clock alone
	}
	found := false
	if s != nil {
		i := -1
		for j, h := range s.holds {
			if id != 0 && h.id == id || id == 0 && (i < 0 || h.exp < s.holds[i].exp) {
				i = j
			}
		}
		if i >= 0 {
			s.holds = append(s.holds[:i], s.holds[i+1:]...)
			found = true
		}
	}
	start, _ := m.windowAt(now)
	if s != nil {
		start = s.start
	}
	if id == 0 || start == stamp {
		m.take(key, now, used, 0, p)
		m.tidy(key, now, p)
	}
	return found
}

// give returns n units taken at stamp (releases lease id) to the key as it
// stands, not brought to now.
func (m *ruleModel) give(key string, now, n, stamp, id int64, lim limits) {
	s := m.keys[key]
	if s == nil {
		return
	}
	if (m.alg == floodgate.TokenBucket || m.alg == floodgate.GCRA) && now >= stamp+m.window {
		return // taken a whole window ago: the tokens are not given back
	}
	switch m.alg {
	case floodgate.FixedWindow:
		if s.start == stamp && now < s.end {
			s.count = max(0, s.count-n)
		}
	case floodgate.SlidingWindow:
		cur := floorDiv(now, m.width())
		if stamp <= cur && stamp > cur-m.buckets {
			s.counts[stamp] -= min(n, s.counts[stamp])
		}
	case floodgate.TokenBucket:
		s.tokens.Add(s.tokens, big.NewRat(n, 1))
	case floodgate.GCRA:
		d := gcraDebt(s, now)
		if d.Sign() == 0 {
			return
		}
		// The lesser of n units at the key's limit and the time the
		// ticket took (whole µs).
		back := ratio(n, m.window, s.tatLimit)
		if lim.limit > s.tatLimit {
			back = big.NewRat(n*m.window/lim.limit, 1)
		}
		d.Sub(d, back)
		if d.Sign() < 0 {
			d.SetInt64(0)
		}
		s.tat = d.Add(d, big.NewRat(now, 1))
	case floodgate.Concurrency:
		for i, l := range s.leases {
			if l.id == id {
				s.leases = append(s.leases[:i], s.leases[i+1:]...)
				break
			}
		}
	}
}

// status is the units left now and the µs until the full quota is back.
func (m *ruleModel) status(s *keyState, now int64, p limits) (remaining, reset int64) {
	switch m.alg {
	case floodgate.FixedWindow:
		if s == nil || s.count == 0 && len(s.holds) == 0 {
			if m.align == floodgate.AlignFirstHit {
				return p.limit, 0
			}
			_, end := m.windowAt(now)
			return p.limit, end - now
		}
		return max(0, p.limit-s.count-held(s.holds, 0)), s.end - now
	case floodgate.SlidingWindow:
		cur := floorDiv(now, m.width())
		newest := int64(-1 << 62)
		if s != nil {
			for b, n := range s.counts {
				if n > 0 && b > cur-m.buckets && b <= cur && b > newest {
					newest = b
				}
			}
		}
		if newest == -1<<62 {
			return p.limit, 0
		}
		return max(0, p.limit-m.slidingSum(s, cur, cur-m.buckets)), (newest+m.buckets)*m.width() - now
	case floodgate.TokenBucket:
		if s == nil {
			return p.burst, 0
		}
		whole := floorRat(s.tokens)
		if whole >= p.burst {
			return p.burst, 0
		}
		short := new(big.Rat).Sub(big.NewRat(p.burst, 1), s.tokens)
		return max(0, whole), ceilRat(short.Mul(short, big.NewRat(m.window, p.limit)))
	case floodgate.GCRA:
		d := gcraDebt(s, now)
		// burst - debt×limit/window tokens are left.
		left := new(big.Rat).Sub(big.NewRat(p.burst, 1), new(big.Rat).Mul(d, big.NewRat(p.limit, m.window)))
		return max(0, floorRat(left)), ceilRat(d)
	case floodgate.Concurrency:
		var last int64
		if s != nil {
			for _, l := range s.leases {
				last = max(last, l.exp)
			}
		}
		if last == 0 {
			return p.limit, 0
		}
		return max(0, p.limit-leased(s, 0)), last - now
	}
	panic("storetest: unknown algorithm")
}

// tidy forgets the key when its state means "nothing held".
func (m *ruleModel) tidy(key string, now int64, p limits) {
	s := m.keys[key]
	if s == nil {
		return
	}
	var empty bool
	switch m.alg {
	case floodgate.FixedWindow:
		empty = s.count == 0 && held(s.holds, now) == 0
	case floodgate.SlidingWindow:
		empty = m.slidingSum(s, floorDiv(now, m.width()), -1<<62) == 0
	case floodgate.TokenBucket:
		empty = s.tokens.Cmp(big.NewRat(p.burst, 1)) >= 0
	case floodgate.GCRA:
		empty = s.tat.Cmp(big.NewRat(now, 1)) <= 0
	case floodgate.Concurrency:
		empty = len(s.leases) == 0
	}
	if empty {
		delete(m.keys, key)
	}
}

// model is a whole limiter: its rules, their keys' state and the tickets it
// handed out.
type model struct {
	rules   []*ruleModel
	tickets []*modelTicket
	nextID  int64
}

type modelTicket struct {
	cost    int64
	spent   bool
	entries []modelEntry
	// reservation: the ticket of a Reserve, of its held rules, each
	// holding cost units as reservation id (the entries' lease).
	reservation bool
}

type modelEntry struct {
	rule  int
	key   string
	stamp int64
	lease int64
	lim   limits
}

// outcome is what the model expects of one decision. rules holds one entry
// per applicable rule (idx names it), in rule order.
type outcome struct {
	allowed bool
	idx     []int
	rules   []ruleResult
	lims    []limits
	ticket  int // index in model.tickets, or -1
}

func newModel(specs []ruleSpec) *model {
	m := &model{}
	for _, s := range specs {
		m.rules = append(m.rules, newRuleModel(s))
	}
	return m
}

// decide runs one consume, peek or record of cost n at now. keys[i] is rule
// i's key ("" skips it) and lims[i] its limits for this decision.
func (m *model) decide(mode floodgate.Mode, now int64, keys []string, lims []limits, n int64) outcome {
	return m.decideHold(mode, now, keys, lims, n, 0, 0)
}

// reserve runs a reservation at now: units held until until by the
// reservable rules, all or nothing with one unit of the others. Its
// ticket is the reservation's.
func (m *model) reserve(now int64, keys []string, lims []limits, units, until int64) outcome {
	return m.decideHold(floodgate.ModeConsume, now, keys, lims, 1, units, until)
}

// decideHold is decide, and with units > 0 a reservation's consume.
func (m *model) decideHold(mode floodgate.Mode, now int64, keys []string, lims []limits, n, units, until int64) outcome {
	out := outcome{ticket: -1}
	cost := func(i int) int64 {
		if units > 0 && m.rules[i].holds {
			return units
		}
		return n
	}
	for i, k := range keys {
		if k != "" {
			out.idx = append(out.idx, i)
			out.lims = append(out.lims, lims[i])
		}
	}
	out.rules = make([]ruleResult, len(out.idx))
	switch mode {
	case floodgate.ModeConsume, floodgate.ModePeek:
		out.allowed = true
		for j, i := range out.idx {
			r := m.rules[i]
			out.rules[j] = r.check(r.at(keys[i], now, lims[i]), now, cost(i), lims[i])
			if !out.rules[j].allowed && !r.shadow {
				out.allowed = false
			}
		}
		if mode == floodgate.ModeConsume && out.allowed {
			m.nextID++
			t := &modelTicket{cost: n, reservation: units > 0}
			if units > 0 {
				t.cost = units
			}
			for j, i := range out.idx {
				r := m.rules[i]
				switch {
				case !out.rules[j].allowed:
				case units > 0 && r.holds:
					stamp := r.hold(keys[i], now, units, until, m.nextID, lims[i])
					t.entries = append(t.entries, modelEntry{rule: i, key: keys[i], stamp: stamp, lease: m.nextID, lim: lims[i]})
				default:
					stamp := r.take(keys[i], now, n, m.nextID, lims[i])
					if !t.reservation {
						t.entries = append(t.entries, modelEntry{rule: i, key: keys[i], stamp: stamp, lease: m.nextID, lim: lims[i]})
					}
				}
			}
			if len(t.entries) > 0 {
				out.ticket = len(m.tickets)
				m.tickets = append(m.tickets, t)
			}
		}
	case floodgate.ModeRecord:
		m.nextID++
		out.allowed = true
		for j, i := range out.idx {
			r := m.rules[i]
			r.take(keys[i], now, n, m.nextID, lims[i])
			out.rules[j] = r.check(r.at(keys[i], now, lims[i]), now, 1, lims[i])
			if !out.rules[j].allowed && !r.shadow {
				out.allowed = false
			}
		}
	}
	for j, i := range out.idx {
		r := m.rules[i]
		out.rules[j].remaining, out.rules[j].reset = r.status(r.at(keys[i], now, lims[i]), now, lims[i])
		if wrote(mode, out, j) {
			r.tidy(keys[i], now, lims[i])
		}
	}
	return out
}

// wrote reports whether the decision out (in mode) wrote its j-th rule.
func wrote(mode floodgate.Mode, out outcome, j int) bool {
	return mode == floodgate.ModeRecord || mode == floodgate.ModeConsume && out.allowed && out.rules[j].allowed
}

// refund gives ticket t back at now, once; a reservation's it releases.
func (m *model) refund(now int64, t int) {
	tk := m.tickets[t]
	if tk.reservation {
		m.settle(now, t, 0)
		return
	}
	if tk.spent {
		return
	}
	tk.spent = true
	for _, e := range tk.entries {
		m.rules[e.rule].give(e.key, now, tk.cost, e.stamp, e.lease, e.lim)
	}
}

// settle settles reservation ticket t at now with used units, once, and
// says what it found, as Limiter.Settle does.
func (m *model) settle(now int64, t int, used int64) floodgate.Settlement {
	tk := m.tickets[t]
	if tk.spent {
		return floodgate.AlreadySettled
	}
	tk.spent = true
	out := floodgate.Settled
	for _, e := range tk.entries {
		if !m.rules[e.rule].settle(e.key, now, used, e.stamp, e.lease, e.lim) {
			out = floodgate.Lapsed
		}
	}
	return out
}

// settleOldest ends the first hold to lapse of each reservable rule's key
// with used units, as Limiter.SettleOldest does.
func (m *model) settleOldest(now int64, keys []string, lims []limits, used int64) floodgate.Settlement {
	out := floodgate.Settled
	for i, k := range keys {
		if k != "" && m.rules[i].holds && !m.rules[i].settle(k, now, used, 0, 0, lims[i]) {
			out = floodgate.Lapsed
		}
	}
	return out
}

// reset forgets every applicable rule's key.
func (m *model) reset(keys []string) {
	for i, k := range keys {
		if k != "" {
			delete(m.rules[i].keys, k)
		}
	}
}

// ratio is a×b/c as an exact rational.
func ratio(a, b, c int64) *big.Rat {
	r := new(big.Rat).SetFrac(big.NewInt(a), big.NewInt(c))
	return r.Mul(r, big.NewRat(b, 1))
}

func floorRat(r *big.Rat) int64 {
	// Euclidean division by the (positive) denominator is floor division.
	return new(big.Int).Div(r.Num(), r.Denom()).Int64()
}

func ceilRat(r *big.Rat) int64 {
	return -floorRat(new(big.Rat).Neg(r))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
