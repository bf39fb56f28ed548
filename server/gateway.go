package server

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/config"
	"github.com/floodgate-go/floodgate/gateway"
)

// maxCandidates bounds the candidates of one POST /v1/select.
const maxCandidates = 64

// Values of floodgate_select_total's result label.
const (
	selectAdmitted  = "admitted"  // a candidate was admitted
	selectCapped    = "capped"    // every remaining candidate was capped
	selectNever     = "never"     // every capped candidate refused a cost it can never admit
	selectExhausted = "exhausted" // nothing capped, nothing left: every candidate was excluded
)

// gatewaySet is what a configuration's gateway sections (token_classes,
// limiters[].token_rules, routes) give the service, built with its
// limiters and swapped with them.
type gatewaySet struct {
	weights gateway.Weights
	routes  map[string][]candidate
	// tokens maps a limiter's name to the view of it holding its token
	// rules alone (Limiter.Only); a limiter absent from it records usage
	// into all its rules.
	tokens map[string]*floodgate.Limiter
}

// candidate is one candidate of a configured route, its limiter resolved.
type candidate struct {
	name    string
	limiter *floodgate.Limiter
	attrs   floodgate.Attributes
}

// buildGateway resolves c's gateway sections against the limiters of set.
func buildGateway(c *config.Config, set *limiterSet) (*gatewaySet, error) {
	if err := c.TokenClasses.Validate(); err != nil {
		return nil, err
	}
	gw := &gatewaySet{
		weights: c.TokenClasses,
		routes:  make(map[string][]candidate, len(c.Routes)),
		tokens:  make(map[string]*floodgate.Limiter),
	}
	for i := range c.Limiters {
		cl := &c.Limiters[i]
		if len(cl.TokenRules) == 0 {
			continue
		}
		only, err := set.byName[cl.Name].Only(cl.TokenRules...)
		if err != nil {
			return nil, err
		}
		gw.tokens[cl.Name] = only
	}
	for _, r := range c.Routes {
		if _, dup := gw.routes[r.Name]; dup {
			return nil, fmt.Errorf("server: duplicate route %q", r.Name)
		}
		list := make([]candidate, 0, len(r.Candidates))
		for _, rc := range r.Candidates {
			l := set.byName[rc.Limiter]
			if l == nil {
				return nil, fmt.Errorf("server: route %q: no limiter named %q", r.Name, rc.Limiter)
			}
			name := rc.Name
			if name == "" {
				name = rc.Limiter
			}
			list = append(list, candidate{name: name, limiter: l, attrs: rc.Attributes})
		}
		gw.routes[r.Name] = list
	}
	return gw, nil
}

// selectRequest is the body of POST /v1/select.
type selectRequest struct {
	// Route names a configured candidate list; Candidates lists the
	// candidates inline instead. Exactly one is set.
	Route      string             `json:"route"`
	Candidates []candidateRequest `json:"candidates"`
	// Attributes are merged under every candidate's own (the caller's
	// key, tenant): a candidate's attribute of the same name wins.
	Attributes map[string]string `json:"attributes"`
	// Exclude names candidates to pass over: those this request already
	// tried and that failed upstream. Their attempts stay counted.
	Exclude []string `json:"exclude"`
}

// candidateRequest is an inline candidate of POST /v1/select.
type candidateRequest struct {
	Name       string            `json:"name"`
	Limiter    string            `json:"limiter"`
	Attributes map[string]string `json:"attributes"`
	Cost       *int64            `json:"cost"`
}

// selectResponse is the answer of POST /v1/select. Its shape is a contract
// (docs/http-api.md).
type selectResponse struct {
	Allowed bool `json:"allowed"`
	// Candidate and Index name the admitted candidate, Index being its
	// position in the route or the request's list ("" and -1 when none).
	Candidate string `json:"candidate"`
	Index     int    `json:"index"`
	// Decision is the admitted candidate's decision, with the ticket that
	// settles or refunds it.
	Decision *DecisionResponse `json:"decision,omitempty"`
	// RetryAfterMS, when none is admitted, is the earliest retry-after
	// among the capped candidates.
	RetryAfterMS int64 `json:"retry_after_ms"`
	Never        bool  `json:"never,omitempty"`
	// Capped counts the candidates skipped because they were capped.
	Capped  int               `json:"capped"`
	Skipped []skippedResponse `json:"skipped"`
}

// skippedResponse is a candidate POST /v1/select decided and skipped.
type skippedResponse struct {
	Name    string `json:"name"`
	Index   int    `json:"index"`
	Limiter string `json:"limiter"`
	// Reason is "limit", or "store" for a fail-closed store failure.
	Reason       string   `json:"reason"`
	Caps         []string `json:"caps"`
	RetryAfterMS int64    `json:"retry_after_ms"`
	Never        bool     `json:"never,omitempty"`
}

// handleSelect serves POST /v1/select: it admits the first candidate
// whose rules all admit the request (one atomic decision per candidate,
// counting the request only there), skipping capped candidates, which are
// not charged. Being capped is a result, answered 200.
func (s *Server) handleSelect(w http.ResponseWriter, r *http.Request) *httpError {
	var req selectRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	set := s.limiters.Load()
	var list []candidate
	var costs []int64 // per candidate of list; nil means 1 each
	switch {
	case req.Route != "" && req.Candidates != nil:
		return badRequest("route and candidates: set one, not both")
	case req.Route != "":
		var ok bool
		if list, ok = set.gateway.routes[req.Route]; !ok {
			return &httpError{status: http.StatusNotFound, kind: kindUnknownRoute,
				detail: fmt.Sprintf("route: no route named %q; GET /v1/limiters lists them", req.Route)}
		}
	case len(req.Candidates) > 0:
		if len(req.Candidates) > maxCandidates {
			return badRequest(fmt.Sprintf("candidates: at most %d, got %d", maxCandidates, len(req.Candidates)))
		}
		list = make([]candidate, len(req.Candidates))
		costs = make([]int64, len(req.Candidates))
		for i, c := range req.Candidates {
			if c.Limiter == "" {
				return badRequest(fmt.Sprintf("candidates[%d].limiter: must be set", i))
			}
			l := set.byName[c.Limiter]
			if l == nil {
				return s.noLimiter(fmt.Sprintf("candidates[%d].limiter", i), c.Limiter, r.URL.Path)
			}
			costs[i] = 1
			if c.Cost != nil {
				costs[i] = *c.Cost
			}
			if costs[i] < 1 {
				return badRequest(fmt.Sprintf("candidates[%d].cost: must be at least 1, got %d", i, costs[i]))
			}
			name := c.Name
			if name == "" {
				name = c.Limiter
			}
			list[i] = candidate{name: name, limiter: l, attrs: floodgate.Attributes(c.Attributes)}
		}
	default:
		return badRequest("route or candidates: one must be set")
	}
	excluded := make(map[string]bool, len(req.Exclude))
	for i, name := range req.Exclude {
		found := false
		for _, c := range list {
			found = found || c.name == name
		}
		if !found {
			return badRequest(fmt.Sprintf("exclude[%d]: no candidate named %q in this list", i, name))
		}
		excluded[name] = true
	}
	cands := make([]gateway.Candidate, 0, len(list))
	index := make([]int, 0, len(list)) // position in list of each of cands
	for i, c := range list {
		if excluded[c.name] {
			continue
		}
		attrs := c.attrs
		if len(req.Attributes) > 0 {
			attrs = make(floodgate.Attributes, len(req.Attributes)+len(c.attrs))
			maps.Copy(attrs, req.Attributes)
			maps.Copy(attrs, c.attrs)
		}
		fc := gateway.Candidate{Name: c.name, Limiter: c.limiter, Attrs: attrs, Cost: 1}
		if costs != nil {
			fc.Cost = costs[i]
		}
		cands = append(cands, fc)
		index = append(index, i)
	}

	sel := gateway.Select(r.Context(), cands)
	if len(sel.Attempts) > 0 {
		last := &sel.Attempts[len(sel.Attempts)-1]
		s.traceDecision(r.Context(), cands[last.Index].Limiter.Name(), len(last.Rules), sel.Allowed)
	}
	out := selectResponse{
		Allowed: sel.Allowed, Index: -1, RetryAfterMS: millis(sel.RetryAfter), Never: sel.Never,
		Capped: sel.Capped, Skipped: make([]skippedResponse, 0, sel.Capped),
	}
	for i := range sel.Attempts {
		a := &sel.Attempts[i]
		if a.Admitted() {
			continue
		}
		caps := a.Caps
		if caps == nil {
			caps = []string{}
		}
		out.Skipped = append(out.Skipped, skippedResponse{
			Name: a.Name, Index: index[a.Index], Limiter: cands[a.Index].Limiter.Name(),
			Reason: a.Decision.Reason.String(), Caps: caps,
			RetryAfterMS: millis(a.Decision.RetryAfter), Never: a.Decision.Never,
		})
	}
	result := selectAdmitted
	if sel.Allowed {
		ticket, e := s.seal(sel.Ticket())
		if e != nil {
			return e
		}
		// Select stops at the first admitted candidate: the last attempt.
		d := s.respond(&sel.Decision, sel.Attempts[len(sel.Attempts)-1].Rules, ticket)
		out.Candidate, out.Index, out.Decision = sel.Name, index[sel.Index], &d
	} else {
		switch {
		case sel.Never:
			result = selectNever
		case sel.Capped > 0:
			result = selectCapped
		default:
			result = selectExhausted
		}
	}
	s.metrics.selects.WithLabelValues(req.Route, result).Inc()
	writeJSON(w, http.StatusOK, out)
	return nil
}

// recordRequest is the body of POST /v1/record.
type recordRequest struct {
	Limiter    string            `json:"limiter"`
	Attributes map[string]string `json:"attributes"`
	// Cost is the units to record into every rule (default 1). Usage,
	// instead, counts tokens by class; their weighted cost (token_classes)
	// is recorded into the limiter's token rules.
	Cost  *int64           `json:"cost"`
	Usage map[string]int64 `json:"usage"`
	// Ticket, when set, is the admission's (from /v1/check or /v1/select)
	// on the same limiter: what the admission already charged is
	// subtracted, so the rules end up charged the cost exactly once.
	Ticket string `json:"ticket"`
	// Peek is refused: only /v1/check peeks. It is decoded to say so.
	Peek bool `json:"peek"`
}

// handleRecord serves POST /v1/record: usage after the fact, with no
// admission check; it may push keys past their limits. With usage, the
// weighted cost goes into the limiter's token rules only; with a ticket,
// the admission's own charge is settled rather than charged twice. The
// decision describes the state afterwards.
func (s *Server) handleRecord(w http.ResponseWriter, r *http.Request) *httpError {
	var req recordRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	if req.Limiter == "" {
		return badRequest("limiter: must be set")
	}
	set := s.limiters.Load()
	l := set.byName[req.Limiter]
	if l != nil && req.Peek {
		return badRequest("peek: only /v1/check peeks")
	}
	if l == nil {
		return s.noLimiter("limiter", req.Limiter, r.URL.Path)
	}
	cost := int64(1)
	switch {
	case req.Cost != nil && req.Usage != nil:
		return badRequest("cost and usage: set one, not both")
	case req.Usage != nil:
		if len(set.gateway.weights) == 0 {
			return badRequest("usage: no token_classes are configured; record a cost instead")
		}
		c, err := set.gateway.weights.Cost(gateway.Usage(req.Usage))
		if err != nil {
			return badRequest("usage: " + trimPrefix(err))
		}
		cost = c
		if tl := set.gateway.tokens[req.Limiter]; tl != nil {
			l = tl
		}
	case req.Cost != nil:
		cost = *req.Cost
	}
	if cost < 0 {
		return badRequest(fmt.Sprintf("cost: must not be negative, got %d", cost))
	}
	var t floodgate.Ticket
	if req.Ticket != "" {
		var err error
		if t, err = openTicket(s.secret, req.Ticket); err != nil {
			return invalidTicket(err.Error())
		}
		if t.Limiter != req.Limiter {
			return invalidTicket(fmt.Sprintf("issued by limiter %q, not %q", t.Limiter, req.Limiter))
		}
	}
	// Recorded usage outlives the request: a client that hangs up must not
	// leave it unrecorded.
	o, err := gateway.RecordUsage(context.WithoutCancel(r.Context()), l, t, floodgate.Attributes(req.Attributes), cost)
	if err != nil {
		return badRequest(err.Error())
	}
	s.traceDecision(r.Context(), l.Name(), len(o.Rules), o.Allowed)
	writeJSON(w, http.StatusOK, s.respond(&o.Decision, o.Rules, ""))
	return nil
}

// trimPrefix drops the gateway package's "gateway: " from err's message.
func trimPrefix(err error) string {
	return strings.TrimPrefix(err.Error(), "gateway: ")
}
