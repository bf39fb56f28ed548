package envoy

import (
	"context"
	"math"
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// decideDomain decides a request to an Envoy-format domain.
func (s *Service) decideDomain(ctx context.Context, st *state, d *domain, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) error {
	n := len(req.Descriptors)
	leaves := make([]*leaf, n)
	keys := make([]string, n)
	limiters := make([]*floodgate.Limiter, n)
	var replaced map[string]bool
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
			limiters[i] = st.limiters[d.name]
		}
		leaves[i], keys[i] = lf, key
		if lf != nil && len(lf.replaces) > 0 {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			for _, r := range lf.replaces {
				replaced[r] = true
			}
		}
	}
	blocked := false
	var groups []*group
	for i, lf := range leaves {
		switch {
		case lf == nil, lf.name != "" && replaced[lf.name]:
			continue // no limit applies: OK
		case lf.unlimited:
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{
				Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32,
			}
			continue
		case lf.rpu == 0:
			// requests_per_unit 0 refuses everything: no counter needed.
			resp.Statuses[i] = s.zeroStatus(lf)
			blocked = blocked || !lf.shadow
			continue
		}
		c := cost(req, i)
		if req.Descriptors[i].GetIsNegativeHits() {
			c = 0 // giving units back has no floodgate form: check only
		}
		g := fit(groups, limiters[i], c, lf)
		if g == nil {
			g = &group{l: limiters[i], cost: c, attrs: make(floodgate.Attributes, 2)}
			groups = append(groups, g)
		}
		g.attrs[lf.rule] = keys[i]
		if lf.override {
			g.attrs[overrideLimitAttr] = strconv.FormatUint(uint64(lf.rpu), 10)
		}
		g.descs = append(g.descs, i)
		g.leaves = append(g.leaves, lf)
	}
	if len(groups) == 0 {
		return nil
	}
	run(ctx, groups, blocked)
	for _, g := range groups {
		rules := g.dec.Rules()
		for j, i := range g.descs {
			lf := g.leaves[j]
			var rd *floodgate.RuleDecision
			for k := range rules {
				if rules[k].Name == lf.rule {
					rd = &rules[k]
					break
				}
			}
			resp.Statuses[i] = s.leafStatus(lf, rd, g)
		}
	}
	return nil
}

// fit returns the group of l and cost c that does not yet hold lf, or nil.
func fit(groups []*group, l *floodgate.Limiter, c int64, lf *leaf) *group {
	for _, g := range groups {
		if g.l != l || g.cost != c {
			continue
		}
		if _, taken := g.attrs[lf.rule]; !taken {
			return g
		}
	}
	return nil
}

// leafStatus is the status of a descriptor whose limit lf was decided in g.
func (s *Service) leafStatus(lf *leaf, rd *floodgate.RuleDecision, g *group) *rlsv3.RateLimitResponse_DescriptorStatus {
	ds := &rlsv3.RateLimitResponse_DescriptorStatus{CurrentLimit: lf.current()}
	switch {
	case g.dec.Reason == floodgate.ReasonStore || rd == nil:
		// The store did not answer: the failure policy decided.
		ds.Code = code(g.dec.Allowed)
		ds.DurationUntilReset = s.alignedReset(lf)
	case rd.Allowed:
		ds.Code = rlsv3.RateLimitResponse_OK
		rem := rd.Remaining
		if g.refunded {
			rem = min(rem+g.cost, lf.capacity())
		}
		ds.LimitRemaining = clamp32(rem)
		ds.DurationUntilReset = duration(rd.ResetAfter)
	default:
		// Over the limit; a shadow limit says OK with nothing left, as
		// the reference service does.
		ds.Code = code(lf.shadow)
		ds.DurationUntilReset = duration(rd.ResetAfter)
	}
	return ds
}

// zeroStatus is the status of a limit of 0 requests per unit.
func (s *Service) zeroStatus(lf *leaf) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code(lf.shadow),
		CurrentLimit:       lf.current(),
		DurationUntilReset: s.alignedReset(lf),
	}
}

// alignedReset is the time until lf's epoch-aligned window ends.
func (s *Service) alignedReset(lf *leaf) *durationpb.Duration {
	w := int64(lf.window)
	if w <= 0 {
		return nil
	}
	now := s.clock.Now().UnixNano()
	return durationpb.New(time.Duration(w - (now%w+w)%w))
}

// current is the leaf's limit as Envoy's API spells it.
func (l *leaf) current() *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: l.rpu, Unit: l.unit, Name: l.name}
	if l.multiplier != 0 {
		rl.UnitMultiplier = wrapperspb.UInt32(l.multiplier)
	}
	return rl
}

// decideLimiter decides a request to one of floodgate's own limiters: each
// descriptor's entries are the attributes of one decision.
func (s *Service) decideLimiter(ctx context.Context, l *floodgate.Limiter, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse) {
	groups := make([]*group, len(req.Descriptors))
	for i, desc := range req.Descriptors {
		attrs := make(floodgate.Attributes, len(desc.GetEntries()))
		for _, e := range desc.GetEntries() {
			attrs[e.GetKey()] = e.GetValue()
		}
		c := cost(req, i)
		if desc.GetIsNegativeHits() {
			c = 0
		}
		groups[i] = &group{l: l, cost: c, attrs: attrs, descs: []int{i}}
	}
	run(ctx, groups, false)
	var rules []floodgate.Rule
	for i, g := range groups {
		d := &g.dec
		if d.Rule == "" {
			continue // no rule applies to these attributes: OK
		}
		if rules == nil {
			rules = l.Rules()
		}
		var r floodgate.Rule
		for _, x := range rules {
			if x.Name == d.Rule {
				r = x
				break
			}
		}
		rl := &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(clamp32(d.Limit)), Name: d.Rule}
		var mult int64
		rl.Unit, mult = unitOf(r)
		if mult > 1 {
			rl.UnitMultiplier = wrapperspb.UInt32(uint32(clamp32(mult)))
		}
		ds := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code: code(d.Allowed), CurrentLimit: rl, DurationUntilReset: duration(d.ResetAfter),
		}
		if d.Allowed && d.Reason != floodgate.ReasonStore {
			rem := d.Remaining
			if g.refunded {
				rem = min(rem+g.cost, max(d.Limit, r.Burst))
			}
			ds.LimitRemaining = clamp32(rem)
		}
		resp.Statuses[i] = ds
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

func duration(d time.Duration) *durationpb.Duration {
	if d <= 0 {
		return nil
	}
	return durationpb.New(d)
}
