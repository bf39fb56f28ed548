package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/envoy"
)

// Each Envoy domain is a limiter, envoy.<domain>, across the API: GET
// /v1/limiters lists it, POST /v1/check decides on it (its attributes are a
// descriptor's entries), POST /v1/refund takes its tickets, and GET /v1/top
// and the status page show it. The endpoints built on floodgate's own
// rules (record, select, reset) take the configuration's limiters only.

// envoyDomain returns the Envoy domain whose limiter is named name.
func (s *Server) envoyDomain(name string) (string, bool) {
	if s.envoy == nil {
		return "", false
	}
	return s.envoy.Domain(name)
}

// noLimiter is the problem of a request to path whose field names no
// limiter that path takes: no limiter at all, or an Envoy domain's.
func (s *Server) noLimiter(field, name, path string) *httpError {
	if d, ok := s.envoyDomain(name); ok {
		return badRequest(fmt.Sprintf("%s: %q is the limiter of the Envoy domain %q, which %s does not take: ask POST /v1/check, or Envoy's API", field, name, d, path))
	}
	return unknownLimiter(field, name)
}

// refunder returns the limiter that refunds the tickets of the limiter
// named name: the configuration's, or an Envoy domain's.
func (s *Server) refunder(name string) *floodgate.Limiter {
	if l := s.limiter(name); l != nil {
		return l
	}
	if d, ok := s.envoyDomain(name); ok {
		return s.envoy.Limiter(d)
	}
	return nil
}

// checkEnvoy answers POST /v1/check on domain's limiter, named name, its
// rules under the names operators read.
func (s *Server) checkEnvoy(w http.ResponseWriter, r *http.Request, name, domain string, mode floodgate.Mode, attrs floodgate.Attributes, cost int64) *httpError {
	o, err := s.envoy.Decide(r.Context(), domain, mode, attrs, cost)
	switch {
	case errors.Is(err, envoy.ErrUnknownDomain): // gone in a reload
		return unknownLimiter("limiter", name)
	case err != nil:
		return badRequest(err.Error())
	}
	t := o.Ticket()
	ticket, e := s.seal(t)
	if e != nil {
		return e
	}
	out := s.respond(&o.Decision, o.Rules, ticket)
	if t.Valid() && !t.Until.IsZero() { // a reservable limit's reservation
		now := time.Now()
		if s.Clock != nil {
			now = s.Clock.Now()
		}
		out.LapsesAfterMS = int64(lapsesAfter(&o, t.Until.Sub(now)) / time.Millisecond)
	}
	out.Rule = s.ruleName(name, out.Rule)
	for i := range out.Rules {
		out.Rules[i].Name = s.ruleName(name, out.Rules[i].Name)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// envoyLimiters is GET /v1/limiters' view of the Envoy domains' limiters,
// sorted by name: each limit a rule under its descriptor path as written,
// keyed on its descriptor's entry keys, as POST /v1/check takes them. The
// limiters made for limit overrides in Envoy's requests are not listed:
// their limits come with each request.
func (s *Server) envoyLimiters() []limiterInfo {
	out := []limiterInfo{}
	if s.envoy == nil {
		return out
	}
	for _, ls := range s.envoy.Limits() {
		if _, ok := s.envoy.Domain(ls.Name); !ok {
			continue
		}
		o := observedLimiter{name: ls.Name, l: ls.Limiter, rules: ls.Rules, domain: ls.Domain}
		li := limiterInfo{Name: o.name, EnvoyDomain: o.domain, FailurePolicy: o.FailurePolicy().String(),
			Shadow: o.Shadow(), Breaker: o.Breaker().String(), Rules: make([]ruleInfo, 0, len(o.rules))}
		for _, r := range o.rules {
			ri := describeRule(r, false)
			ri.Name, ri.Key = s.envoy.RuleName(o.name, r.Name), s.envoy.RuleKeys(o.name, r.Name)
			li.Rules = append(li.Rules, ri)
		}
		out = append(out, li)
	}
	return out
}
