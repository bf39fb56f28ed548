package server

import (
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store"
)

// envoyPrefix starts the names of the Envoy domains' limiters; the
// configuration's limiters may not use it.
const envoyPrefix = "envoy."

// observedLimiter is a limiter as operators see it in GET /v1/top, on the
// status page and in floodgate_breaker_state: one of the configuration's,
// or one serving Envoy domains (named "envoy." and the domain).
type observedLimiter struct {
	name string
	// l decides; nil for an Envoy domain without counted limits.
	l     *floodgate.Limiter
	rules []floodgate.Rule
	// domain is the Envoy domain, "" for a limiter of the configuration.
	domain string
	// chain is the limiter's store (stores.go).
	chain *chain
}

// FailurePolicy is the limiter's, or open for a domain without counted
// limits (no store call of its can fail).
func (o observedLimiter) FailurePolicy() floodgate.FailurePolicy {
	if o.l == nil {
		return floodgate.FailOpen
	}
	return o.l.FailurePolicy()
}

// Name is the limiter's name.
func (o observedLimiter) Name() string { return o.name }

// Breaker is the state of the breaker of the limiter's store: closed
// without one.
func (o observedLimiter) Breaker() store.BreakerState { return o.chain.breaker() }

// Shadow reports whether the whole limiter runs dark.
func (o observedLimiter) Shadow() bool { return o.l != nil && o.l.Shadow() }

// Rule returns the limiter's rule named name.
func (o observedLimiter) Rule(name string) (floodgate.Rule, bool) {
	for _, r := range o.rules {
		if r.Name == name {
			return r, true
		}
	}
	return floodgate.Rule{}, false
}

// observed lists the limiters operators see: the configuration's, in its
// order, then the Envoy service's, sorted by name.
func (s *Server) observed() []observedLimiter {
	set := s.limiters.Load()
	var out []observedLimiter
	for _, cl := range set.config.Limiters {
		l := set.byName[cl.Name]
		out = append(out, observedLimiter{name: l.Name(), l: l, rules: l.Rules(), chain: set.chains[cl.Name]})
	}
	if s.envoy != nil {
		for _, ls := range s.envoy.Limits() {
			out = append(out, observedLimiter{name: ls.Name, l: ls.Limiter, rules: ls.Rules, domain: ls.Domain, chain: s.envoyOn.Load()})
		}
	}
	return out
}

// observedLimiter returns the limiter operators see under name.
func (s *Server) observedLimiter(name string) (observedLimiter, bool) {
	for _, l := range s.observed() {
		if l.name == name {
			return l, true
		}
	}
	return observedLimiter{}, false
}

// ruleName is the name operators read for limiter's rule, in metrics, on
// the status page and in GET /v1/top: an Envoy domain's limit under its
// descriptor path as written (envoy.Service.RuleName), any other rule under
// its own name.
func (s *Server) ruleName(limiter, rule string) string {
	if s.envoy == nil || !strings.HasPrefix(limiter, envoyPrefix) {
		return rule
	}
	return s.envoy.RuleName(limiter, rule)
}

// rule returns l's rule that operators read as name (see ruleName), or
// that is named name.
func (s *Server) rule(l observedLimiter, name string) (floodgate.Rule, bool) {
	if r, ok := l.Rule(name); ok {
		return r, true
	}
	for _, r := range l.rules {
		if s.ruleName(l.name, r.Name) == name {
			return r, true
		}
	}
	return floodgate.Rule{}, false
}
