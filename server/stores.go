package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/guard"
)

// The service's limiters decide on chains of stores. Over a remote store
// (Redis), a limiter's chain is, from the top: a span per call when the
// service traces, the metrics' timing, the
// quota grants of its rules that ask for them (store/grant), a guard of
// its deadline and breaker with the fallback (store/guard), and Store
// (the over-limit cache and Redis, as cmd/floodgate builds it). Each
// limiter of the configuration has a chain of its own, made with it; the
// Envoy domains share one per deadline and breaker. Over an in-process
// store (one that binds, as the memory store does), every chain is the
// store, timed (and traced).

// retireAfter is how long a reload leaves the replaced limiters' grants
// before giving them back: decisions that started on the old limiters
// finish first.
const retireAfter = 5 * time.Second

// policy is what a remote store's guard takes of a limiter's
// configuration: its deadline and breaker.
type policy struct {
	deadline time.Duration
	breaker  store.BreakerOptions
}

// chain is the store of a limiter, or of the Envoy domains.
type chain struct {
	store store.Store  // what the limiters are given
	guard *guard.Store // nil over an in-process store
	grant *grant.Store // nil without granted rules, or over an in-process store
}

// breaker is the state of the chain's breaker: closed without one.
func (c *chain) breaker() store.BreakerState {
	if c == nil || c.guard == nil {
		return store.BreakerClosed
	}
	return c.guard.State()
}

// close gives the chain's grants back to the store.
func (c *chain) close() {
	if c.grant != nil {
		c.grant.Close()
	}
}

// newChain makes the chain of a limiter of policy p, with quota grants
// when granted.
func (s *Server) newChain(p policy, granted bool) (*chain, error) {
	if !s.remote {
		return &chain{store: s.traced(s.metrics.instrument(s.Store))}, nil
	}
	g, err := guard.New(s.Store, &guard.Options{
		Timeout: p.deadline, Breaker: p.breaker, Fallback: s.Fallback,
		Clock: s.Clock, Logger: s.Logger, Name: "redis",
	})
	if err != nil {
		return nil, err
	}
	c := &chain{guard: g, store: g}
	if granted {
		c.grant = grant.New(g, nil)
		c.store = c.grant
	}
	c.store = s.traced(s.metrics.instrument(c.store))
	s.grants.add(c.grant)
	return c, nil
}

// granted reports whether a rule of rules asks for quota grants.
func granted(rules []floodgate.Rule) bool {
	for _, r := range rules {
		if r.Grant {
			return true
		}
	}
	return false
}

// envoyChain returns the chain of the Envoy domains under policy p, made
// on first use and kept until Close.
func (s *Server) envoyChain(p policy) (*chain, error) {
	s.envoyChainsMu.Lock()
	defer s.envoyChainsMu.Unlock()
	if c := s.envoyChains[p]; c != nil {
		return c, nil
	}
	c, err := s.newChain(p, true) // any domain may ask for grants
	if err != nil {
		return nil, err
	}
	if s.envoyChains == nil {
		s.envoyChains = make(map[policy]*chain)
	}
	s.envoyChains[p] = c
	return c, nil
}

// retire gives the grants of set's limiters back once decisions made on
// them have finished.
func (s *Server) retire(set *limiterSet) {
	if set == nil {
		return
	}
	time.AfterFunc(retireAfter, func() {
		for _, c := range set.chains {
			c.close()
		}
	})
}

// closeChains gives every chain's grants back to the store.
func (s *Server) closeChains() {
	if set := s.limiters.Load(); set != nil {
		for _, c := range set.chains {
			c.close()
		}
	}
	s.envoyChainsMu.Lock()
	defer s.envoyChainsMu.Unlock()
	for _, c := range s.envoyChains {
		c.close()
	}
}

// grantStores are every grant store the service has made, for their
// counts, which outlive reloads.
type grantStores struct {
	mu  sync.Mutex
	all []*grant.Store
}

func (g *grantStores) add(s *grant.Store) {
	if s == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.all = append(g.all, s)
}

// stats sums the counts of the grant stores.
func (g *grantStores) stats() grant.Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sum grant.Stats
	for _, s := range g.all {
		st := s.Stats()
		sum.Grants += st.Grants
		sum.Granted += st.Granted
		sum.Returned += st.Returned
		sum.Stranded += st.Stranded
		sum.Local += st.Local
		sum.Passed += st.Passed
	}
	return sum
}

// registerGrants exports the counts of the service's grants.
func (s *Server) registerGrants() error {
	for _, c := range []struct {
		name, help string
		count      func(grant.Stats) int64
	}{
		{"floodgate_grants_total", "Quota grants taken from Redis (rules with grant: true).", func(s grant.Stats) int64 { return s.Grants }},
		{"floodgate_grant_units_total", "Units taken from Redis in quota grants.", func(s grant.Stats) int64 { return s.Granted }},
		{"floodgate_grant_returned_units_total", "Units of quota grants given back to Redis unspent.", func(s grant.Stats) int64 { return s.Returned }},
		{"floodgate_grant_stranded_units_total", "Units of quota grants neither spent nor given back: their window ended first, or the refund that would have given them back failed.", func(s grant.Stats) int64 { return s.Stranded }},
		{"floodgate_grant_local_decisions_total", "Decisions on granted rules answered in-process, from a grant or a held denial.", func(s grant.Stats) int64 { return s.Local }},
		{"floodgate_grant_passed_decisions_total", "Decisions on granted rules sent to Redis as they are (too little left to grant).", func(s grant.Stats) int64 { return s.Passed }},
	} {
		count := c.count
		err := s.Registerer.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: c.name, Help: c.help},
			func() float64 { return float64(count(s.grants.stats())) }))
		if err != nil {
			return err
		}
	}
	return nil
}
