package envoy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/floodgate-go/floodgate"
)

// A domain's limits can be asked through floodgate's own API too (POST
// /v1/check with the limiter envoy.<domain>): the request's attributes are
// then the entries of one descriptor, decided as ShouldRateLimit decides
// that descriptor.

// ErrUnknownDomain is Decide's error for a domain no file configures.
var ErrUnknownDomain = errors.New("envoy: unknown domain")

// Decide decides a request to domain of one descriptor whose entries are
// attrs, as ShouldRateLimit decides it with hits_addend cost: mode
// floodgate.ModeConsume charges cost when it fits, and cost 0 checks
// whether one more would; floodgate.ModePeek asks whether cost units would
// fit, charging nothing.
//
// A descriptor's entries are ordered, attrs are not: they are taken in the
// order the domain's descriptors nest their keys (tenant, then user). When
// two orders lead to two limits, Decide returns an error that names them.
//
// The outcome is the domain limiter's, under its rules' names (RuleName
// gives the names operators read), with a ticket that Limiter(domain)
// refunds. A descriptor that matches no limit, or an unlimited one, is
// admitted by no rule; a limit of 0 requests per unit refuses for good
// (Never), and a refused request is charged to a fixed-window limit as
// ShouldRateLimit charges it. On a reservable limit, a consume of cost 0
// reserves (the ticket then settles the reservation), and one of cost n
// settles the oldest hold with n units used, answering a peek at one unit
// afterwards.
func (s *Service) Decide(ctx context.Context, domain string, mode floodgate.Mode, attrs floodgate.Attributes, cost int64) (floodgate.Outcome, error) {
	st := s.cur.Load()
	d := st.cfg.domains[domain]
	if d == nil {
		return floodgate.Outcome{}, ErrUnknownDomain
	}
	entries, err := d.order(attrs)
	if err != nil {
		return floodgate.Outcome{}, err
	}
	lf, key := d.match(entries)
	switch {
	case lf == nil || lf.unlimited:
		return floodgate.Outcome{Decision: floodgate.Decision{Allowed: true}}, nil
	case lf.rpu == 0:
		st.observeZero(ctx, d, lf, key, cost)
		return st.zeroOutcome(lf, key), nil
	}
	g := &group{l: st.limiters[domain], cost: cost, attrs: floodgate.Attributes{lf.rule: key}, leaves: []*leaf{lf}}
	if mode == floodgate.ModeConsume && lf.reserve > 0 {
		if cost > 0 {
			return st.settleOldest(ctx, g.l, lf, key, cost), nil
		}
		g.reserve, g.hold = reservation(lf, cost)
		g.decide(ctx, mode, true)
		st.reserved(g)
		return g.out, nil
	}
	if g.out, err = g.l.Decide(ctx, mode, g.attrs, cost); err != nil {
		return floodgate.Outcome{}, err
	}
	if mode == floodgate.ModeConsume && !g.out.Allowed {
		g.chargeRefused(ctx)
	}
	return g.out, nil
}

// order returns attrs as the entries of a descriptor, in the order in
// which d's tree takes their keys to a limit, or nil when no order reaches
// one. Each order is one path down the tree, so the search visits each
// node at most once.
func (d *domain) order(attrs floodgate.Attributes) ([]*ratelimitv3.RateLimitDescriptor_Entry, error) {
	keys := slices.Sorted(maps.Keys(attrs))
	var path, found []string
	var leaf *leaf
	used := make([]bool, len(keys))
	var walk func(n *node) error
	walk = func(n *node) error {
		for i, k := range keys {
			if used[i] {
				continue
			}
			next, _ := n.child(k, attrs[k])
			if next == nil {
				continue
			}
			path = append(path, k)
			switch {
			case len(path) == len(keys) && next.limit != nil:
				if leaf != nil {
					return fmt.Errorf("attributes: the domain's descriptors take these entries in two orders, (%s) for the limit %s and (%s) for %s; ask with POST /json, whose descriptors list their entries in order",
						strings.Join(found, ", "), leaf.path, strings.Join(path, ", "), next.limit.path)
				}
				found, leaf = slices.Clone(path), next.limit
			case len(path) < len(keys) && next.hasChildren():
				used[i] = true
				if err := walk(next); err != nil {
					return err
				}
				used[i] = false
			}
			path = path[:len(path)-1]
		}
		return nil
	}
	if len(keys) == 0 {
		return nil, nil
	}
	if err := walk(d.root); err != nil {
		return nil, err
	}
	entries := make([]*ratelimitv3.RateLimitDescriptor_Entry, len(found))
	for i, k := range found {
		entries[i] = &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: attrs[k]}
	}
	return entries, nil
}
