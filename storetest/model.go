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
		if s == nil || s.count+n <= p.limit {
			return ruleResult{allowed: true}
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
		if held(s, 0)+n <= p.limit {
			return ruleResult{allowed: true}
		}
		exps := make([]int64, 0, len(s.leases))
		for _, l := range s.leases {
			exps = append(exps, l.exp)
		}
		sort.Slice(exps, func(i, j int) bool { return exps[i] < exps[j] })
		for _, e := range exps {
			if held(s, e)+n <= p.limit {
				return ruleResult{retry: e - now}
			}
		}
		panic("storetest: concurrency model found no retry time")
	}
	panic("storetest: unknown algorithm")
}

// held is the slots of leases that outlive t.
func held(s *keyState, t int64) int64 {
	var n int64
	if s == nil {
		return 0
	}
	for _, l := range s.leases {
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
		if s == nil || s.count == 0 {
			if m.align == floodgate.AlignFirstHit {
				return p.limit, 0
			}
			_, end := m.windowAt(now)
			return p.limit, end - now
		}
		return max(0, p.limit-s.count), s.end - now
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
		return max(0, p.limit-held(s, 0)), last - now
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
		empty = s.count == 0
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
	out := outcome{ticket: -1}
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
			out.rules[j] = r.check(r.at(keys[i], now, lims[i]), now, n, lims[i])
			if !out.rules[j].allowed && !r.shadow {
				out.allowed = false
			}
		}
		if mode == floodgate.ModeConsume && out.allowed {
			m.nextID++
			t := &modelTicket{cost: n}
			for j, i := range out.idx {
				if out.rules[j].allowed {
					stamp := m.rules[i].take(keys[i], now, n, m.nextID, lims[i])
					t.entries = append(t.entries, modelEntry{rule: i, key: keys[i], stamp: stamp, lease: m.nextID, lim: lims[i]})
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

// refund gives ticket t back at now, once.
func (m *model) refund(now int64, t int) {
	tk := m.tickets[t]
	if tk.spent {
		return
	}
	tk.spent = true
	for _, e := range tk.entries {
		m.rules[e.rule].give(e.key, now, tk.cost, e.stamp, e.lease, e.lim)
	}
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
