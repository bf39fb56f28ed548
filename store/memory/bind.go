package memory

import (
	"cmp"

	"github.com/floodgate-go/floodgate/store"
)

var _ store.Binder = (*Store)(nil)

// Bind returns the decisions of rules on s (see store.Binder): a Call is
// decided as Apply decides the Batch of the same ops, by the same steps,
// without building one.
func (s *Store) Bind(rules []store.BoundRule) store.Bound {
	b := &bound{s: s, rules: make([]boundRule, len(rules))}
	for i, r := range rules {
		b.rules[i] = boundRule{scope: s.scopeID(r.Scope), params: r.Params, shadow: r.Shadow}
	}
	return b
}

// bound is a set of rules bound to a Store.
type bound struct {
	s     *Store
	rules []boundRule
}

// boundRule is one rule of a bound set, its scope numbered.
type boundRule struct {
	scope  uint32
	params store.Params
	shadow bool
}

// Decide decides c on the bound rules.
func (b *bound) Decide(c store.Call) (a store.Answer) {
	var names [store.MaxCallOps]name
	var ops [store.MaxCallOps]op
	// params are the ops' limits where c changes them, made only then:
	// the rules' own are the commonest, and zeroing the array is not free.
	var params *[store.MaxCallOps]store.Params
	if c.Limits != [store.MaxCallOps]int64{} || c.Bursts != [store.MaxCallOps]int64{} {
		params = new([store.MaxCallOps]store.Params)
	}
	for i := range c.N {
		r := &b.rules[c.Rules[i]]
		p := &r.params
		if c.Limits[i] != 0 || c.Bursts[i] != 0 {
			params[i] = *p
			p = &params[i]
			p.Limit = cmp.Or(c.Limits[i], p.Limit)
			p.Burst = cmp.Or(c.Bursts[i], p.Burst)
		}
		a.Stamps[i] = c.Stamps[i]
		// Assigned, not appended: an append might move the ops to the
		// heap, and the answer they point to with them. Field by field:
		// the rest of the op is zero until decide resolves it.
		names[i] = name{r.scope, c.Keys[i]}
		ops[i].p, ops[i].shadow, ops[i].held = p, r.shadow, reserves(c.Mode, c.Hold, c.Held[i], p)
		ops[i].res, ops[i].stamp = &a.Results[i], &a.Stamps[i]
	}
	a.Allowed = b.s.decide(c.Mode, c.Now, c.Cost, c.Ticket, c.Hold, names[:c.N], ops[:c.N])
	return a
}

// One decides a Call of one rule (see store.Bound).
func (b *bound) One(mode store.Mode, now, cost int64, ticket uint64, key string, limit, burst int64) (res store.Result, stamp int64, allowed bool) {
	r := &b.rules[0]
	p := &r.params
	if limit != 0 || burst != 0 {
		q := *p // this decision's limits
		q.Limit, q.Burst = cmp.Or(limit, q.Limit), cmp.Or(burst, q.Burst)
		p = &q
	}
	names := [1]name{{r.scope, key}}
	ops := [1]op{{p: p, shadow: r.shadow, res: &res, stamp: &stamp}}
	if mode == store.Record {
		return res, stamp, b.s.decide(mode, now, cost, ticket, store.Hold{}, names[:], ops[:])
	}
	return res, stamp, b.s.decideOne(mode, now, cost, ticket, names[0], &ops[0])
}
