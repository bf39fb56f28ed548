package server

import (
	"net/http"
	"sort"

	"github.com/floodgate-go/floodgate"
)

// limiterInfo and ruleInfo are GET /v1/limiters' view of the configuration.
type limiterInfo struct {
	Name string `json:"name"`
	// EnvoyDomain is the Envoy domain the limiter serves, absent for one
	// of the configuration's limiters.
	EnvoyDomain   string     `json:"envoy_domain,omitempty"`
	FailurePolicy string     `json:"failure_policy"`
	Shadow        bool       `json:"shadow"`
	Breaker       string     `json:"breaker"`
	Rules         []ruleInfo `json:"rules"`
	// TokenRules name the rules usage is recorded into; absent: all.
	TokenRules []string `json:"token_rules,omitempty"`
}

// routeInfo is GET /v1/limiters' view of a configured route.
type routeInfo struct {
	Name       string          `json:"name"`
	Candidates []candidateInfo `json:"candidates"`
}

type candidateInfo struct {
	Name       string            `json:"name"`
	Limiter    string            `json:"limiter"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

type ruleInfo struct {
	Name      string   `json:"name"`
	Key       []string `json:"key"`
	Algorithm string   `json:"algorithm"`
	Limit     int64    `json:"limit"`
	Window    string   `json:"window,omitempty"`
	WindowMS  int64    `json:"window_ms,omitempty"`
	Burst     int64    `json:"burst,omitempty"`
	Buckets   int64    `json:"buckets,omitempty"`
	Align     string   `json:"align,omitempty"`
	TimeZone  string   `json:"time_zone,omitempty"`
	Shadow    bool     `json:"shadow"`
	// Reservable says the rule's units may be reserved (POST /v1/check
	// with "reserve").
	Reservable bool               `json:"reservable,omitempty"`
	Overrides  []overrideResponse `json:"overrides,omitempty"`
}

// overrideResponse is an override as GET /v1/limiters shows it. The values
// it matches (tenant or user ids) are shown to admins only: everyone sees
// which attributes it matches on.
type overrideResponse struct {
	MatchAttributes []string          `json:"match_attributes"`
	Match           map[string]string `json:"match,omitempty"`
	Limit           int64             `json:"limit"`
	Burst           int64             `json:"burst,omitempty"`
}

// handleLimiters serves GET /v1/limiters: the limiters in use and their
// rules, with defaults applied, and the token classes and routes. The values
// overrides match are shown only to a request with the admin token.
func (s *Server) handleLimiters(w http.ResponseWriter, r *http.Request) *httpError {
	set := s.limiters.Load()
	admin := s.isAdmin(r)
	out := struct {
		Limiters     []limiterInfo    `json:"limiters"`
		TokenClasses map[string]int64 `json:"token_classes"`
		Routes       []routeInfo      `json:"routes"`
	}{
		Limiters:     make([]limiterInfo, 0, len(set.names)),
		TokenClasses: set.gateway.weights,
		Routes:       make([]routeInfo, 0, len(set.config.Routes)),
	}
	if out.TokenClasses == nil {
		out.TokenClasses = map[string]int64{}
	}
	for _, cr := range set.config.Routes {
		ri := routeInfo{Name: cr.Name, Candidates: make([]candidateInfo, 0, len(cr.Candidates))}
		for _, c := range set.gateway.routes[cr.Name] {
			ri.Candidates = append(ri.Candidates, candidateInfo{Name: c.name, Limiter: c.limiter.Name(), Attributes: c.attrs})
		}
		out.Routes = append(out.Routes, ri)
	}
	for _, cl := range set.config.Limiters {
		l := set.byName[cl.Name]
		li := limiterInfo{
			Name:          l.Name(),
			FailurePolicy: l.FailurePolicy().String(),
			Shadow:        l.Shadow(),
			Breaker:       set.chains[cl.Name].breaker().String(),
			TokenRules:    cl.TokenRules,
		}
		for _, rule := range l.Rules() {
			li.Rules = append(li.Rules, describeRule(rule, admin))
		}
		out.Limiters = append(out.Limiters, li)
	}
	out.Limiters = append(out.Limiters, s.envoyLimiters()...)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// describeRule is GET /v1/limiters' view of rule; the values its overrides
// match are shown to admins only.
func describeRule(rule floodgate.Rule, admin bool) ruleInfo {
	ri := ruleInfo{
		Name:       rule.Name,
		Key:        rule.Key,
		Algorithm:  rule.Algorithm.String(),
		Limit:      rule.Limit,
		Burst:      rule.Burst,
		Buckets:    rule.Buckets,
		Shadow:     rule.Shadow,
		Reservable: rule.Reservable,
	}
	if ri.Key == nil {
		ri.Key = []string{}
	}
	calendar := rule.Align == floodgate.AlignDay || rule.Align == floodgate.AlignMonth
	if !calendar {
		ri.Window, ri.WindowMS = rule.Window.String(), millis(rule.Window)
	}
	if rule.Algorithm == floodgate.FixedWindow {
		ri.Align = rule.Align.String()
	}
	if calendar {
		ri.TimeZone = "UTC"
		if rule.Location != nil {
			ri.TimeZone = rule.Location.String()
		}
	}
	for _, o := range rule.Overrides {
		or := overrideResponse{MatchAttributes: make([]string, 0, len(o.Match)), Limit: o.Limit, Burst: o.Burst}
		for k := range o.Match {
			or.MatchAttributes = append(or.MatchAttributes, k)
		}
		sort.Strings(or.MatchAttributes)
		if admin {
			or.Match = o.Match
		}
		ri.Overrides = append(ri.Overrides, or)
	}
	return ri
}

// handleHealthz serves GET /healthz: the process is alive.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) *httpError {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}
