package memory

import "github.com/floodgate-go/floodgate/store"

var _ store.Binder = (*Store)(nil)

// Bind returns the decisions of rules on s (see store.Binder): a Call is
// decided as Apply decides the Batch of the same rules, by the same steps,
// without building one.
func (s *Store) Bind(rules []store.BoundRule) store.Bound {
	if len(rules) > store.MaxBound {
		panic("memory: Bind of more than store.MaxBound rules")
	}
	b := &bound{s: s, n: len(rules)}
	for i, r := range rules {
		b.scopes[i], b.params[i], b.shadow[i] = s.scopeID(r.Scope), r.Params, r.Shadow
	}
	return b
}

// bound is a set of rules bound to a Store.
type bound struct {
	s      *Store
	n      int
	scopes [store.MaxBound]uint32
	params [store.MaxBound]store.Params
	shadow [store.MaxBound]bool
}

// Decide decides c on the bound rules.
func (b *bound) Decide(c store.Call) store.Answer {
	if c.Limits == [store.MaxBound]int64{} && c.Bursts == [store.MaxBound]int64{} {
		return b.decide(&c, &b.params)
	}
	params := b.params // this decision's limits
	for i := range b.n {
		if c.Limits[i] != 0 {
			params[i].Limit = c.Limits[i]
		}
		if c.Bursts[i] != 0 {
			params[i].Burst = c.Bursts[i]
		}
	}
	return b.decide(&c, &params)
}

// decide decides c under params.
func (b *bound) decide(c *store.Call, params *[store.MaxBound]store.Params) (a store.Answer) {
	var names [store.MaxBound]name
	var ops [store.MaxBound]op
	n := 0
	for i := range b.n {
		if c.Keys[i] == "" {
			continue
		}
		// Assigned, not appended: an append might move the ops to the
		// heap, and the answer they point to with them.
		names[n] = name{b.scopes[i], c.Keys[i]}
		ops[n] = op{p: &params[i], shadow: b.shadow[i], res: &a.Results[n], stamp: &a.Stamps[n]}
		n++
	}
	if n > 0 {
		a.Allowed = b.s.decide(c.Mode, c.Now, c.Cost, c.Ticket, names[:n], ops[:n])
	}
	return a
}

// One decides a Call of one rule (see store.Bound).
func (b *bound) One(mode store.Mode, now, cost int64, ticket uint64, key string, limit, burst int64) (res store.Result, stamp int64, allowed bool) {
	p := &b.params[0]
	if limit != 0 || burst != 0 {
		q := *p // this decision's limits
		if limit != 0 {
			q.Limit = limit
		}
		if burst != 0 {
			q.Burst = burst
		}
		p = &q
	}
	names := [1]name{{b.scopes[0], key}}
	ops := [1]op{{p: p, shadow: b.shadow[0], res: &res, stamp: &stamp}}
	if mode == store.Record {
		allowed = b.s.decide(mode, now, cost, ticket, names[:], ops[:])
	} else {
		allowed = b.s.decideOne(mode, now, cost, ticket, names[0], &ops[0])
	}
	return res, stamp, allowed
}
