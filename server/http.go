package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-go/floodgate"
)

// route is one endpoint of the HTTP API.
type route struct {
	path    string
	method  string // GET routes answer HEAD too
	name    string // the handler label of the HTTP metrics
	access  access
	handler func(http.ResponseWriter, *http.Request) *httpError
}

// access says who may call a route.
type access uint8

const (
	public    access = iota
	admin            // with the admin bearer token
	adminPage        // with the admin token, as a bearer token or a browser's basic password
)

// routes lists the HTTP API; metrics serves /metrics.
func (s *Server) routes(metrics http.Handler) []route {
	return []route{
		{"/v1/check", http.MethodPost, "check", public, s.handleCheck},
		{"/v1/record", http.MethodPost, "record", public, s.handleRecord},
		{"/v1/select", http.MethodPost, "select", public, s.handleSelect},
		{"/v1/refund", http.MethodPost, "refund", public, s.handleRefund},
		{"/v1/settle", http.MethodPost, "settle", public, s.handleSettle},
		{"/v1/reset", http.MethodPost, "reset", admin, s.handleReset},
		{"/v1/limiters", http.MethodGet, "limiters", public, s.handleLimiters},
		{"/v1/top", http.MethodGet, "top", admin, s.handleTop},
		{statusPath, http.MethodGet, "status", adminPage, s.handleStatusPage},
		{"/healthz", http.MethodGet, "healthz", public, s.handleHealthz},
		{"/readyz", http.MethodGet, "readyz", public, s.handleReadyz},
		{"/healthcheck", http.MethodGet, "healthcheck", public, s.handleHealthcheck}, // the reference service's (reference.go)
		{"/json", http.MethodPost, "json", public, s.handleJSON},
		{"/metrics", http.MethodGet, "metrics", public, func(w http.ResponseWriter, r *http.Request) *httpError {
			metrics.ServeHTTP(w, r)
			return nil
		}},
	}
}

// AdminEndpoints lists the endpoints that need the admin token, such as
// "POST /v1/reset": all of them are off while AdminToken is empty.
func (s *Server) AdminEndpoints() []string {
	var out []string
	for _, rt := range s.routes(nil) {
		if rt.access != public {
			out = append(out, rt.method+" "+rt.path)
		}
	}
	return out
}

// Handler returns the HTTP API. It is valid after Open (tests may serve it
// with httptest).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	traced := map[string]bool{"check": true, "record": true, "select": true, "refund": true, "settle": true, "json": true}
	for _, rt := range s.routes(promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{})) {
		switch rt.access {
		case admin:
			rt.handler = s.admin(rt.handler)
		case adminPage:
			rt.handler = s.adminPage(rt.handler)
		}
		h := s.instrumented(rt.name, rt)
		if traced[rt.name] {
			h = s.tracedHTTP(rt.path, h)
		}
		mux.Handle(rt.path, h)
	}
	mux.Handle("/", s.instrumented("other", route{handler: func(w http.ResponseWriter, r *http.Request) *httpError {
		return &httpError{status: http.StatusNotFound, kind: kindNotFound, detail: fmt.Sprintf("no endpoint %s; see docs/http-api.md", r.URL.Path)}
	}}))
	return mux
}

// instrumented serves rt, checking its method, answering errors as
// problems, and counting and timing the request.
func (s *Server) instrumented(name string, rt route) http.Handler {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rt.method != "" && r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
			allow := rt.method
			if rt.method == http.MethodGet {
				allow = "GET, HEAD"
			}
			w.Header().Set("Allow", allow)
			writeProblem(w, &httpError{status: http.StatusMethodNotAllowed, kind: kindMethod,
				detail: fmt.Sprintf("%s takes %s, not %s", rt.path, allow, r.Method)})
			return
		}
		if e := rt.handler(w, r); e != nil {
			writeProblem(w, e)
		}
	})
	labels := prometheus.Labels{"handler": name}
	return promhttp.InstrumentHandlerDuration(s.metrics.httpDuration.MustCurryWith(labels),
		promhttp.InstrumentHandlerCounter(s.metrics.httpRequests.MustCurryWith(labels), h))
}

// decisionRequest is the body of POST /v1/check and /v1/reset.
type decisionRequest struct {
	Limiter    string            `json:"limiter"`
	Attributes map[string]string `json:"attributes"`
	// Cost is a pointer so that an absent cost (1) differs from 0 (peek).
	Cost *int64 `json:"cost"`
	// Peek, on /v1/check, asks whether cost units would be admitted now
	// without charging them.
	Peek bool `json:"peek"`
	// Reserve, on /v1/check, makes the decision a reservation
	// (reserve.go).
	Reserve *reserveRequest `json:"reserve"`
}

// refundRequest is the body of POST /v1/refund.
type refundRequest struct {
	Ticket string `json:"ticket"`
}

// DecisionResponse is the JSON form of a floodgate.Outcome, as /v1/check,
// /v1/record and /v1/select answer it. Its shape is a contract
// (docs/http-api.md); clients such as `floodgate check` decode into it.
type DecisionResponse struct {
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	Rule    string `json:"rule"`
	Limit   int64  `json:"limit"`
	// Capacity is the binding rule's capacity (see RuleResponse), which
	// Remaining counts against: a token bucket's limit is its rate, its
	// capacity its burst.
	Capacity     int64  `json:"capacity"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Never        bool   `json:"never,omitempty"`
	Ticket       string `json:"ticket"`
	// LapsesAfterMS is, for an admitted reservation, the time until its
	// holds lapse unless settled first (rounded down).
	LapsesAfterMS int64          `json:"lapses_after_ms,omitempty"`
	Rules         []RuleResponse `json:"rules"`
}

// RuleResponse is one rule's part of a DecisionResponse.
type RuleResponse struct {
	Name    string `json:"name"`
	Allowed bool   `json:"allowed"`
	Shadow  bool   `json:"shadow"`
	Limit   int64  `json:"limit"`
	// Capacity is the most units one request can be admitted at once: a
	// token bucket's or GCRA rule's burst (its Limit is the rate), else
	// the limit. Remaining counts against it.
	Capacity     int64 `json:"capacity"`
	Remaining    int64 `json:"remaining"`
	ResetAfterMS int64 `json:"reset_after_ms"`
	RetryAfterMS int64 `json:"retry_after_ms"`
	Never        bool  `json:"never,omitempty"`
}

// millis rounds d up to whole milliseconds, so that a client that waits
// retry_after_ms is never early.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// respond is the JSON form of decision d with its rules' results and its
// sealed ticket.
func (s *Server) respond(d *floodgate.Decision, rules []floodgate.RuleDecision, ticket string) DecisionResponse {
	out := DecisionResponse{
		Allowed:      d.Allowed,
		Reason:       d.Reason.String(),
		Rule:         d.Rule,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		ResetAfterMS: millis(d.ResetAfter),
		RetryAfterMS: millis(d.RetryAfter),
		Never:        d.Never,
		Ticket:       ticket,
		Rules:        make([]RuleResponse, 0, len(rules)),
	}
	out.Capacity = d.Limit
	for _, r := range rules {
		if r.Name == d.Rule {
			out.Capacity = r.Capacity
		}
		out.Rules = append(out.Rules, RuleResponse{
			Name:         r.Name,
			Allowed:      r.Allowed,
			Shadow:       r.Shadow,
			Limit:        r.Limit,
			Capacity:     r.Capacity,
			Remaining:    r.Remaining,
			ResetAfterMS: millis(r.ResetAfter),
			RetryAfterMS: millis(r.RetryAfter),
			Never:        r.Never,
		})
	}
	return out
}

// decisionArgs are a check or reset request, read and checked.
type decisionArgs struct {
	name string
	l    *floodgate.Limiter // the configuration's limiter named name
	// domain is, when l is nil, the Envoy domain whose limiter is named
	// name.
	domain string
	attrs  floodgate.Attributes
	cost   int64
	peek   bool
	// hold, when not 0, makes the check a reservation of units.
	units int64
	hold  time.Duration
}

// readDecision reads and checks a check or reset request; "peek" and
// "reserve" are refused unless checkOK, and a request naming an Envoy
// domain's limiter unless envoyOK.
func (s *Server) readDecision(w http.ResponseWriter, r *http.Request, checkOK, envoyOK bool) (decisionArgs, *httpError) {
	var req decisionRequest
	if e := s.decode(w, r, &req); e != nil {
		return decisionArgs{}, e
	}
	if req.Limiter == "" {
		return decisionArgs{}, badRequest("limiter: must be set")
	}
	a := decisionArgs{name: req.Limiter, l: s.limiter(req.Limiter), attrs: floodgate.Attributes(req.Attributes), cost: 1, peek: req.Peek}
	if a.l == nil {
		d, ok := s.envoyDomain(req.Limiter)
		if !ok || !envoyOK {
			return decisionArgs{}, s.noLimiter("limiter", req.Limiter, r.URL.Path)
		}
		a.domain = d
	}
	if req.Cost != nil {
		a.cost = *req.Cost
	}
	if a.cost < 0 {
		return decisionArgs{}, badRequest(fmt.Sprintf("cost: must not be negative, got %d", a.cost))
	}
	if req.Peek && !checkOK {
		return decisionArgs{}, badRequest("peek: only /v1/check peeks")
	}
	if req.Reserve != nil {
		if !checkOK {
			return decisionArgs{}, badRequest("reserve: only /v1/check reserves")
		}
		if e := s.readReserve(&a, &req); e != nil {
			return decisionArgs{}, e
		}
	}
	return a, nil
}

// handleCheck serves POST /v1/check: one decision, consuming cost (default
// 1) when admitted; cost 0 peeks at one unit, and "peek": true at cost
// units. An Envoy domain's limiter decides the attributes as one
// descriptor's entries (envoy.Service.Decide).
func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) *httpError {
	a, e := s.readDecision(w, r, true, true)
	if e != nil {
		return e
	}
	// The answer lists every rule's result and the ticket: a full
	// decision.
	mode, cost := floodgate.ModeConsume, a.cost
	if a.peek {
		mode, cost = floodgate.ModePeek, max(cost, 1)
	}
	if a.l == nil {
		return s.checkEnvoy(w, r, a.name, a.domain, mode, a.attrs, cost)
	}
	if a.hold != 0 {
		return s.reserve(w, r, &a)
	}
	o, err := a.l.Decide(r.Context(), mode, a.attrs, cost)
	if err != nil {
		return badRequest(err.Error())
	}
	s.traceDecision(r.Context(), a.l.Name(), len(o.Rules), o.Allowed)
	ticket, e := s.seal(o.Ticket())
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, s.respond(&o.Decision, o.Rules, ticket))
	return nil
}

// seal returns t sealed for the client, or "" when t is not valid (the
// decision charged nothing).
func (s *Server) seal(t floodgate.Ticket) (string, *httpError) {
	if !t.Valid() {
		return "", nil
	}
	ticket, err := sealTicket(s.secret, t)
	if err != nil {
		return "", &httpError{status: http.StatusInternalServerError, kind: "internal", detail: "sealing the ticket failed"}
	}
	return ticket, nil
}

// handleRefund serves POST /v1/refund: gives a ticket's units back (or
// releases its lease). It answers 204 whether or not there was anything
// left to give back; a refund the store could not apply is logged and
// counted, and leaves the limiter stricter.
func (s *Server) handleRefund(w http.ResponseWriter, r *http.Request) *httpError {
	var req refundRequest
	limit := s.refundBodyBytes()
	if e := decodeJSON(http.MaxBytesReader(w, r.Body, limit), &req, limit); e != nil {
		return e
	}
	if req.Ticket == "" {
		return badRequest("ticket: must be set")
	}
	t, err := openTicket(s.secret, req.Ticket)
	if err != nil {
		s.metrics.refunds.WithLabelValues("", "rejected").Inc()
		return invalidTicket(err.Error())
	}
	if l := s.refunder(t.Limiter); l != nil {
		// The refund outlives the request: a client that hangs up must not
		// leave the units taken.
		ctx := context.WithoutCancel(r.Context())
		switch err := l.Refund(ctx, t); {
		case err != nil:
			s.metrics.refunds.WithLabelValues(t.Limiter, "failed").Inc()
		case !s.refunded.first(t.ID):
			s.metrics.refunds.WithLabelValues(t.Limiter, "replayed").Inc()
		default:
			s.metrics.refunds.WithLabelValues(t.Limiter, "applied").Inc()
			s.metrics.holds.Settled(t) // a reservation's ticket: released
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// refundBodyBytes caps refund bodies. A ticket holds the key of each rule
// it charged, and a key can be nearly as long as a check body: the cap is
// what base64 makes of that many keys, so that every ticket the service
// issues can be refunded.
func (s *Server) refundBodyBytes() int64 {
	rules := max(s.limiters.Load().maxRules, 1)
	return s.MaxBodyBytes*int64(rules)*4/3 + 4<<10
}

// handleReset serves POST /v1/reset (admin): forgets the state of every
// rule's key for the given attributes.
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) *httpError {
	a, e := s.readDecision(w, r, false, false)
	if e != nil {
		return e
	}
	l, attrs := a.l, a.attrs
	if err := l.Reset(r.Context(), attrs); err != nil {
		s.Logger.Warn("reset failed", "limiter", l.Name(), "err", err)
		return &httpError{status: http.StatusServiceUnavailable, kind: kindStore, detail: "the store could not reset the keys: " + err.Error()}
	}
	s.Logger.Info("keys reset", "limiter", l.Name(), "remote", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// isAdmin reports whether r carries the admin bearer token (never when
// none is configured).
func (s *Server) isAdmin(r *http.Request) bool {
	if s.AdminToken == "" {
		return false
	}
	want := sha256.Sum256([]byte(s.AdminToken))
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// admin guards h with the admin bearer token. Its refusals say why: no
// token is configured (403), or the request's is missing or wrong (401).
func (s *Server) admin(h func(http.ResponseWriter, *http.Request) *httpError) func(http.ResponseWriter, *http.Request) *httpError {
	return func(w http.ResponseWriter, r *http.Request) *httpError {
		if s.AdminToken == "" {
			return adminDisabled()
		}
		auth := r.Header.Get("Authorization")
		if !s.isAdmin(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="floodgate"`)
			detail := "the admin token is wrong"
			if auth == "" {
				detail = "admin endpoints need an Authorization: Bearer <token> header"
			}
			return &httpError{status: http.StatusUnauthorized, kind: kindUnauthorized, detail: detail}
		}
		return h(w, r)
	}
}

// adminDisabled is the refusal of an admin endpoint while no admin token
// is configured.
func adminDisabled() *httpError {
	return &httpError{status: http.StatusForbidden, kind: kindAdminDisabled,
		detail: "admin endpoints are disabled: no admin token is configured; start the service with --admin-token or FLOODGATE_ADMIN_TOKEN"}
}
