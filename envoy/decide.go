package envoy

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
)

// decideDomain decides a request to an Envoy-format domain.
func (s *Service) decideDomain(ctx context.Context, st *state, d *domain, req *rlsv3.RateLimitRequest, resp response) error {
	n := len(req.Descriptors)
	w := scratches.Get().(*scratch)
	defer w.release()
	w.grow(n)
	leaves, keys, limiters := w.leaves[:n], w.keys[:n], w.limiters[:n]
	tree := st.limiters[d.name] // the limiter of the domain's own limits
	for i, desc := range req.Descriptors {
		var lf *leaf
		var key string
		if ov := desc.GetLimit(); ov != nil {
			// Envoy supplied the limit: the tree is not consulted.
			var err error
			if lf, limiters[i], err = s.override(st, d, ov); err != nil {
				return err
			}
			key = counterKey(desc.GetEntries(), nil)
		} else {
			lf, key = d.match(desc.GetEntries())
			limiters[i] = tree
		}
		leaves[i], keys[i] = lf, key
		if lf != nil && len(lf.replaces) > 0 {
			if w.replaced == nil {
				w.replaced = make(map[string]bool)
			}
			for _, r := range lf.replaces {
				w.replaced[r] = true
			}
		}
	}
	blocked := false
	for i, lf := range leaves {
		switch {
		case lf == nil, lf.name != "" && w.replaced[lf.name]:
			continue // no limit applies: OK
		case lf.unlimited:
			ds := resp.status(i)
			ds.Code, ds.LimitRemaining = rlsv3.RateLimitResponse_OK, math.MaxUint32
			continue
		case lf.rpu == 0:
			// requests_per_unit 0 refuses everything: no counter needed,
			// but the refusal is reported like any denial.
			st.zeroStatus(resp, i, lf)
			st.observeZero(ctx, d, lf, keys[i], cost(req, i))
			blocked = blocked || !lf.shadow
			continue
		}
		c := cost(req, i)
		if req.Descriptors[i].GetIsNegativeHits() {
			st.giveBack(ctx, resp, i, limiters[i], lf, keys[i], c)
			continue
		}
		if lf.reserve > 0 && c > 0 {
			st.settle(ctx, resp, i, limiters[i], lf, keys[i], c)
			continue
		}
		g := fit(w.groups, limiters[i], c, lf)
		if g == nil {
			g = w.group(limiters[i], c, lf)
		}
		g.attrs[lf.rule] = keys[i]
		if lf.override {
			g.attrs[overrideLimitAttr] = strconv.FormatUint(uint64(lf.rpu), 10)
		}
		g.descs = append(g.descs, i)
		g.leaves = append(g.leaves, lf)
	}
	if len(w.groups) == 0 {
		return nil
	}
	run(ctx, w.groups, blocked)
	for _, g := range w.groups {
		for j, i := range g.descs {
			st.leafStatus(resp, i, g.leaves[j], g)
		}
		st.reserved(g)
	}
	return nil
}

// limitResult is what one limit of a group decided.
type limitResult struct {
	allowed    bool // for a shadow limit, false when it would have denied
	remaining  int64
	resetAfter time.Duration
}

// result returns what g's limit rule decided, and false when the rule
// was not applied. A group decided by the lean call is one limit: the
// decision's binding rule is that limit's.
func (g *group) result(rule string) (limitResult, bool) {
	for _, r := range g.out.Rules {
		if r.Name == rule {
			return limitResult{r.Allowed, r.Remaining, r.ResetAfter}, true
		}
	}
	if d := &g.out.Decision; g.out.Rules == nil && d.Rule == rule {
		return limitResult{d.Allowed && !d.ShadowDenied, d.Remaining, d.ResetAfter}, true
	}
	return limitResult{}, false
}

// scratch is the working memory of one decideDomain call. Scratches are
// recycled (see scratches), so a decision allocates none of it: nothing in
// a scratch outlives the call, the engine keeps no reference to the
// attributes it is given, and the response is built apart.
type scratch struct {
	leaves   []*leaf
	keys     []string
	limiters []*floodgate.Limiter
	replaced map[string]bool
	groups   []*group // in use, in order of creation
	spare    []*group // cleared, ready for reuse
}

var scratches = sync.Pool{New: func() any { return new(scratch) }}

// grow makes room for n descriptors.
func (w *scratch) grow(n int) {
	if cap(w.leaves) < n {
		w.leaves = make([]*leaf, n)
		w.keys = make([]string, n)
		w.limiters = make([]*floodgate.Limiter, n)
	}
}

// group returns a cleared group for limiter l and cost c, of lf's
// reservation (reservation), appended to w.groups.
func (w *scratch) group(l *floodgate.Limiter, c int64, lf *leaf) *group {
	var g *group
	if k := len(w.spare); k > 0 {
		g, w.spare = w.spare[k-1], w.spare[:k-1]
	} else {
		g = &group{attrs: make(floodgate.Attributes, 2)}
	}
	g.l, g.cost = l, c
	g.reserve, g.hold = reservation(lf, c)
	w.groups = append(w.groups, g)
	return g
}

// maxScratchDescriptors bounds the scratches kept for reuse, so that one
// huge request does not pin its memory in the pool.
const maxScratchDescriptors = 64

// release clears w, dropping every reference the call made, and puts it
// back in the pool.
func (w *scratch) release() {
	if cap(w.leaves) > maxScratchDescriptors || len(w.groups)+len(w.spare) > maxScratchDescriptors {
		return
	}
	clear(w.leaves[:cap(w.leaves)])
	clear(w.keys[:cap(w.keys)])
	clear(w.limiters[:cap(w.limiters)])
	clear(w.replaced)
	for _, g := range w.groups {
		g.l, g.cost, g.reserve, g.hold, g.refunded = nil, 0, 0, 0, false
		clear(g.attrs)
		clear(g.descs)
		g.descs = g.descs[:0]
		clear(g.leaves)
		g.leaves = g.leaves[:0]
		g.out = floodgate.Outcome{}
		w.spare = append(w.spare, g)
	}
	clear(w.groups)
	w.groups = w.groups[:0]
	scratches.Put(w)
}

// fit returns the group of l, cost c and lf's reservation that does not
// yet hold lf, or nil.
func fit(groups []*group, l *floodgate.Limiter, c int64, lf *leaf) *group {
	units, hold := reservation(lf, c)
	for _, g := range groups {
		if g.l != l || g.cost != c || g.reserve != units || g.hold != hold {
			continue
		}
		if _, taken := g.attrs[lf.rule]; !taken {
			return g
		}
	}
	return nil
}

// leafStatus writes the status of descriptor i, whose limit lf was decided
// in g.
func (st *state) leafStatus(resp response, i int, lf *leaf, g *group) {
	ds := resp.status(i)
	rd, applied := g.result(lf.rule)
	if g.out.Reason == floodgate.ReasonStore || !applied {
		// The store did not answer: the failure policy decided.
		st.failedStatus(resp, i, lf, g.out.Allowed)
		return
	}
	resp.setLimit(i, lf)
	switch {
	case rd.allowed:
		ds.Code = rlsv3.RateLimitResponse_OK
		rem := rd.remaining
		if g.refunded {
			rem = min(rem+g.units(), lf.capacity())
		}
		ds.LimitRemaining = clamp32(rem)
		resp.setReset(i, rd.resetAfter)
	default:
		// Over the limit; a shadow limit says OK with nothing left, as
		// the reference service does.
		ds.Code = code(lf.shadow)
		resp.setReset(i, rd.resetAfter)
	}
}

// failedStatus writes the status of descriptor i, whose limit lf the
// store could not decide, as the failure policy did (allowed: open). Open
// is OK without a current_limit, the reference service's answer when it
// has no figure: a limit with 0 remaining would become
// x-ratelimit-remaining: 0 on a request Envoy lets through. Closed is
// OVER_LIMIT with the limit, nothing remaining and the window's end.
func (st *state) failedStatus(resp response, i int, lf *leaf, allowed bool) {
	ds := resp.status(i)
	ds.Code = code(allowed)
	if allowed {
		return
	}
	resp.setLimit(i, lf)
	resp.setReset(i, st.alignedReset(lf))
}

// giveBack gives n units back to descriptor i's limit lf (is_negative_hits:
// a reservation larger than the usage), in the window it counts in now,
// and writes its status: OK (a give-back is never refused) with what is
// left after it. A give-back that fails leaves the limit stricter; the
// limiter logs it.
func (st *state) giveBack(ctx context.Context, resp response, i int, l *floodgate.Limiter, lf *leaf, key string, n int64) {
	attrs := floodgate.Attributes{lf.rule: key}
	if lf.override {
		attrs[overrideLimitAttr] = strconv.FormatUint(uint64(lf.rpu), 10)
	}
	_ = l.GiveBack(ctx, attrs, n)
	d, _ := l.Peek(ctx, attrs, 1)
	ds := resp.status(i)
	ds.Code = rlsv3.RateLimitResponse_OK
	if d.Reason == floodgate.ReasonStore {
		return // no figure, as in failedStatus
	}
	resp.setLimit(i, lf)
	ds.LimitRemaining = clamp32(d.Remaining)
	resp.setReset(i, d.ResetAfter)
}

// zeroStatus writes the status of descriptor i, whose limit lf is 0
// requests per unit.
func (st *state) zeroStatus(resp response, i int, lf *leaf) {
	ds := resp.status(i)
	ds.Code = code(lf.shadow)
	resp.setLimit(i, lf)
	resp.setReset(i, st.alignedReset(lf))
}

// alignedReset is the time until lf's epoch-aligned window ends, or 0 when
// lf has no window.
func (st *state) alignedReset(lf *leaf) time.Duration {
	w := int64(lf.window)
	if w <= 0 {
		return 0
	}
	now := st.clock.Now().UnixNano()
	return time.Duration(w - (now%w+w)%w)
}

// decideLimiter decides a request to one of floodgate's own limiters: each
// descriptor's entries are the attributes of one decision.
func (s *Service) decideLimiter(ctx context.Context, l *floodgate.Limiter, req *rlsv3.RateLimitRequest, resp response) {
	groups := make([]*group, len(req.Descriptors))
	for i, desc := range req.Descriptors {
		attrs := make(floodgate.Attributes, len(desc.GetEntries()))
		for _, e := range desc.GetEntries() {
			attrs[e.GetKey()] = e.GetValue()
		}
		groups[i] = &group{l: l, cost: cost(req, i), attrs: attrs, descs: []int{i}}
	}
	run(ctx, groups, false)
	for i, g := range groups {
		d := &g.out.Decision
		if d.Rule == "" {
			continue // no rule applies to these attributes: OK
		}
		r, _ := l.Rule(d.Rule)
		unit, mult := unitOf(r)
		var m uint32
		if mult > 1 {
			m = clamp32(mult)
		}
		ds := resp.status(i)
		ds.Code = code(d.Allowed)
		if d.Allowed && d.Reason == floodgate.ReasonStore {
			continue // failed open: no figure, as in failedStatus
		}
		resp.setCurrent(i, clamp32(d.Limit), unit, m, d.Rule)
		resp.setReset(i, d.ResetAfter)
		if d.Allowed {
			rem := d.Remaining
			if g.refunded {
				rem = min(rem+g.cost, max(d.Limit, r.Burst))
			}
			ds.LimitRemaining = clamp32(rem)
		}
	}
}

// unitOf spells a rule's window as an Envoy unit and multiplier: the
// largest unit that divides it. Windows that are not whole seconds have
// no spelling (UNKNOWN).
func unitOf(r floodgate.Rule) (rlsv3.RateLimitResponse_RateLimit_Unit, int64) {
	if r.Algorithm == floodgate.FixedWindow {
		switch r.Align {
		case floodgate.AlignDay:
			return rlsv3.RateLimitResponse_RateLimit_DAY, 1
		case floodgate.AlignMonth:
			return rlsv3.RateLimitResponse_RateLimit_MONTH, 1
		}
	}
	if r.Window < time.Second || r.Window%time.Second != 0 {
		return rlsv3.RateLimitResponse_RateLimit_UNKNOWN, 0
	}
	secs := int64(r.Window / time.Second)
	for _, u := range []rlsv3.RateLimitResponse_RateLimit_Unit{
		rlsv3.RateLimitResponse_RateLimit_YEAR, rlsv3.RateLimitResponse_RateLimit_MONTH,
		rlsv3.RateLimitResponse_RateLimit_WEEK, rlsv3.RateLimitResponse_RateLimit_DAY,
		rlsv3.RateLimitResponse_RateLimit_HOUR, rlsv3.RateLimitResponse_RateLimit_MINUTE,
	} {
		if secs%unitSeconds[u] == 0 {
			return u, secs / unitSeconds[u]
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_SECOND, secs
}

func code(ok bool) rlsv3.RateLimitResponse_Code {
	if ok {
		return rlsv3.RateLimitResponse_OK
	}
	return rlsv3.RateLimitResponse_OVER_LIMIT
}

func clamp32(v int64) uint32 {
	return uint32(min(max(v, 0), math.MaxUint32))
}
