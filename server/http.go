package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	handler func(http.ResponseWriter, *http.Request) *httpError
}

// Handler returns the HTTP API. It is valid after Open (tests may serve it
// with httptest).
func (s *Server) Handler() http.Handler {
	metricsHandler := promhttp.HandlerFor(s.Gatherer, promhttp.HandlerOpts{})
	routes := []route{
		{"/v1/check", http.MethodPost, "check", s.handleCheck},
		{"/v1/record", http.MethodPost, "record", s.handleRecord},
		{"/v1/refund", http.MethodPost, "refund", s.handleRefund},
		{"/v1/reset", http.MethodPost, "reset", s.admin(s.handleReset)},
		{"/v1/limiters", http.MethodGet, "limiters", s.handleLimiters},
		{"/healthz", http.MethodGet, "healthz", s.handleHealthz},
		{"/readyz", http.MethodGet, "readyz", s.handleReadyz},
		{"/metrics", http.MethodGet, "metrics", func(w http.ResponseWriter, r *http.Request) *httpError {
			metricsHandler.ServeHTTP(w, r)
			return nil
		}},
	}
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.path, s.instrumented(rt.name, rt))
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

// decisionRequest is the body of POST /v1/check, /v1/record and /v1/reset.
type decisionRequest struct {
	Limiter    string            `json:"limiter"`
	Attributes map[string]string `json:"attributes"`
	// Cost is a pointer so that an absent cost (1) differs from 0 (peek).
	Cost *int64 `json:"cost"`
	// Peek, on /v1/check, asks whether cost units would be admitted now
	// without charging them.
	Peek bool `json:"peek"`
}

// refundRequest is the body of POST /v1/refund.
type refundRequest struct {
	Ticket string `json:"ticket"`
}

// decisionResponse is the JSON form of a floodgate.Decision. Its shape is a
// contract (docs/http-api.md).
type decisionResponse struct {
	Allowed      bool           `json:"allowed"`
	Reason       string         `json:"reason"`
	Rule         string         `json:"rule"`
	Limit        int64          `json:"limit"`
	Remaining    int64          `json:"remaining"`
	ResetAfterMS int64          `json:"reset_after_ms"`
	RetryAfterMS int64          `json:"retry_after_ms"`
	Never        bool           `json:"never,omitempty"`
	Ticket       string         `json:"ticket"`
	Rules        []ruleResponse `json:"rules"`
}

type ruleResponse struct {
	Name         string `json:"name"`
	Allowed      bool   `json:"allowed"`
	Shadow       bool   `json:"shadow"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Never        bool   `json:"never,omitempty"`
}

// millis rounds d up to whole milliseconds, so that a client that waits
// retry_after_ms is never early.
func millis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (s *Server) respond(d *floodgate.Decision, ticket string) decisionResponse {
	out := decisionResponse{
		Allowed:      d.Allowed,
		Reason:       d.Reason.String(),
		Rule:         d.Rule,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		ResetAfterMS: millis(d.ResetAfter),
		RetryAfterMS: millis(d.RetryAfter),
		Never:        d.Never,
		Ticket:       ticket,
		Rules:        make([]ruleResponse, 0, len(d.Rules())),
	}
	for _, r := range d.Rules() {
		out.Rules = append(out.Rules, ruleResponse{
			Name:         r.Name,
			Allowed:      r.Allowed,
			Shadow:       r.Shadow,
			Limit:        r.Limit,
			Remaining:    r.Remaining,
			ResetAfterMS: millis(r.ResetAfter),
			RetryAfterMS: millis(r.RetryAfter),
			Never:        r.Never,
		})
	}
	return out
}

// decode reads r's JSON body into v: one object, no unknown fields, at
// most MaxBodyBytes.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) *httpError {
	return decodeJSON(http.MaxBytesReader(w, r.Body, s.MaxBodyBytes), v, s.MaxBodyBytes)
}

func decodeJSON(body io.Reader, v any, limit int64) *httpError {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return jsonError(err, limit)
		}
		return badRequest("the body must hold a single JSON object")
	}
	return nil
}

// jsonError explains a decoding error to the client.
func jsonError(err error, limit int64) *httpError {
	var (
		tooBig *http.MaxBytesError
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooBig):
		return &httpError{status: http.StatusRequestEntityTooLarge, kind: kindBodyTooLarge,
			detail: fmt.Sprintf("the body is larger than %d bytes", limit)}
	case errors.Is(err, io.EOF):
		return badRequest("the body is empty; it must be a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("the body ends in the middle of a JSON value")
	case errors.As(err, &syntax):
		return badRequest(fmt.Sprintf("the body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset))
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("the body must be a JSON object")
		}
		want := "a string"
		switch typ.Type.Kind().String() {
		case "int64":
			want = "a whole number"
		case "map":
			want = "an object of string values"
		}
		field := typ.Field
		if field == "attributes" || strings.HasPrefix(field, "attributes.") {
			field = "attributes"
			want = "an object of string values"
		}
		return badRequest(fmt.Sprintf("%s: must be %s, got a JSON %s", field, want, typ.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest(strings.TrimPrefix(err.Error(), "json: ") + "; see docs/http-api.md")
	}
	return badRequest(fmt.Sprintf("the body is not a valid request: %v", err))
}

// decision reads and checks a check, record or reset request.
func (s *Server) decision(w http.ResponseWriter, r *http.Request) (*floodgate.Limiter, floodgate.Attributes, int64, *httpError) {
	l, attrs, cost, _, e := s.decisionPeek(w, r, false)
	return l, attrs, cost, e
}

// decisionPeek is decision that also reads "peek" when peekOK.
func (s *Server) decisionPeek(w http.ResponseWriter, r *http.Request, peekOK bool) (*floodgate.Limiter, floodgate.Attributes, int64, bool, *httpError) {
	l, attrs, cost, peek, e := s.readDecision(w, r)
	if e == nil && peek && !peekOK {
		e = badRequest("peek: only /v1/check peeks")
	}
	return l, attrs, cost, peek, e
}

func (s *Server) readDecision(w http.ResponseWriter, r *http.Request) (*floodgate.Limiter, floodgate.Attributes, int64, bool, *httpError) {
	var req decisionRequest
	if e := s.decode(w, r, &req); e != nil {
		return nil, nil, 0, false, e
	}
	if req.Limiter == "" {
		return nil, nil, 0, false, badRequest("limiter: must be set")
	}
	l := s.limiter(req.Limiter)
	if l == nil {
		return nil, nil, 0, false, &httpError{status: http.StatusNotFound, kind: kindUnknownLimiter,
			detail: fmt.Sprintf("limiter: no limiter named %q; GET /v1/limiters lists them", req.Limiter)}
	}
	cost := int64(1)
	if req.Cost != nil {
		cost = *req.Cost
	}
	if cost < 0 {
		return nil, nil, 0, false, badRequest(fmt.Sprintf("cost: must not be negative, got %d", cost))
	}
	return l, floodgate.Attributes(req.Attributes), cost, req.Peek, nil
}

// handleCheck serves POST /v1/check: one decision, consuming cost (default
// 1) when admitted; cost 0 peeks at one unit, and "peek": true at cost
// units.
func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) *httpError {
	l, attrs, cost, peek, e := s.decisionPeek(w, r, true)
	if e != nil {
		return e
	}
	var d floodgate.Decision
	var err error
	if peek {
		d, err = l.Peek(r.Context(), attrs, max(cost, 1))
	} else {
		d, err = l.AllowN(r.Context(), attrs, cost)
	}
	if err != nil {
		return badRequest(err.Error())
	}
	var ticket string
	if t := d.Ticket(); t.Valid() {
		if ticket, err = sealTicket(s.secret, t); err != nil {
			return &httpError{status: http.StatusInternalServerError, kind: "internal", detail: "sealing the ticket failed"}
		}
	}
	writeJSON(w, http.StatusOK, s.respond(&d, ticket))
	return nil
}

// handleRecord serves POST /v1/record: usage after the fact, with no
// admission check. The decision describes the state afterwards.
func (s *Server) handleRecord(w http.ResponseWriter, r *http.Request) *httpError {
	l, attrs, cost, e := s.decision(w, r)
	if e != nil {
		return e
	}
	d, err := l.Record(r.Context(), attrs, cost)
	if err != nil {
		return badRequest(err.Error())
	}
	writeJSON(w, http.StatusOK, s.respond(&d, ""))
	return nil
}

// handleRefund serves POST /v1/refund: gives a ticket's units back (or
// releases its lease). It answers 204 whether or not there was anything
// left to give back; a refund the store could not apply is logged and
// counted, and leaves the limiter stricter.
func (s *Server) handleRefund(w http.ResponseWriter, r *http.Request) *httpError {
	var req refundRequest
	if e := s.decode(w, r, &req); e != nil {
		return e
	}
	if req.Ticket == "" {
		return badRequest("ticket: must be set")
	}
	t, err := openTicket(s.secret, req.Ticket)
	if err != nil {
		s.metrics.refunds.WithLabelValues("", "rejected").Inc()
		return &httpError{status: http.StatusBadRequest, kind: kindInvalidTicket, detail: "ticket: " + err.Error()}
	}
	if l := s.limiter(t.Limiter); l != nil {
		// The refund outlives the request: a client that hangs up must not
		// leave the units taken.
		ctx := context.WithoutCancel(r.Context())
		if err := l.Refund(ctx, t); err != nil {
			s.metrics.refunds.WithLabelValues(t.Limiter, "failed").Inc()
		} else {
			s.metrics.refunds.WithLabelValues(t.Limiter, "applied").Inc()
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleReset serves POST /v1/reset (admin): forgets the state of every
// rule's key for the given attributes.
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) *httpError {
	l, attrs, _, e := s.decision(w, r)
	if e != nil {
		return e
	}
	if err := l.Reset(r.Context(), attrs); err != nil {
		s.Logger.Warn("reset failed", "limiter", l.Name(), "err", err)
		return &httpError{status: http.StatusServiceUnavailable, kind: kindStore, detail: "the store could not reset the keys: " + err.Error()}
	}
	s.Logger.Info("keys reset", "limiter", l.Name(), "remote", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// admin guards h with the admin bearer token.
func (s *Server) admin(h func(http.ResponseWriter, *http.Request) *httpError) func(http.ResponseWriter, *http.Request) *httpError {
	want := sha256.Sum256([]byte(s.AdminToken))
	return func(w http.ResponseWriter, r *http.Request) *httpError {
		if s.AdminToken == "" {
			return &httpError{status: http.StatusForbidden, kind: kindAdminDisabled,
				detail: "admin endpoints are disabled: start the service with --admin-token or FLOODGATE_ADMIN_TOKEN"}
		}
		auth := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(auth, " ")
		got := sha256.Sum256([]byte(strings.TrimSpace(token)))
		if !ok || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
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

// limiterInfo and ruleInfo are GET /v1/limiters' view of the configuration.
type limiterInfo struct {
	Name          string     `json:"name"`
	FailurePolicy string     `json:"failure_policy"`
	Shadow        bool       `json:"shadow"`
	Breaker       string     `json:"breaker"`
	Rules         []ruleInfo `json:"rules"`
}

type ruleInfo struct {
	Name      string             `json:"name"`
	Key       []string           `json:"key"`
	Algorithm string             `json:"algorithm"`
	Limit     int64              `json:"limit"`
	Window    string             `json:"window,omitempty"`
	WindowMS  int64              `json:"window_ms,omitempty"`
	Burst     int64              `json:"burst,omitempty"`
	Buckets   int64              `json:"buckets,omitempty"`
	Align     string             `json:"align,omitempty"`
	TimeZone  string             `json:"time_zone,omitempty"`
	Shadow    bool               `json:"shadow"`
	Overrides []overrideResponse `json:"overrides,omitempty"`
}

type overrideResponse struct {
	Match map[string]string `json:"match"`
	Limit int64             `json:"limit"`
	Burst int64             `json:"burst,omitempty"`
}

// handleLimiters serves GET /v1/limiters: the limiters in use and their
// rules, with defaults applied.
func (s *Server) handleLimiters(w http.ResponseWriter, r *http.Request) *httpError {
	set := s.limiters.Load()
	out := struct {
		Limiters []limiterInfo `json:"limiters"`
	}{Limiters: make([]limiterInfo, 0, len(set.names))}
	for _, cl := range set.config.Limiters {
		l := set.byName[cl.Name]
		li := limiterInfo{
			Name:          l.Name(),
			FailurePolicy: l.FailurePolicy().String(),
			Shadow:        l.Shadow(),
			Breaker:       l.Breaker().String(),
		}
		for _, rule := range l.Rules() {
			ri := ruleInfo{
				Name:      rule.Name,
				Key:       rule.Key,
				Algorithm: rule.Algorithm.String(),
				Limit:     rule.Limit,
				Burst:     rule.Burst,
				Buckets:   rule.Buckets,
				Shadow:    rule.Shadow,
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
				ri.Overrides = append(ri.Overrides, overrideResponse{Match: o.Match, Limit: o.Limit, Burst: o.Burst})
			}
			li.Rules = append(li.Rules, ri)
		}
		out.Limiters = append(out.Limiters, li)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// handleHealthz serves GET /healthz: the process is alive.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) *httpError {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// Pinger is implemented by stores that can tell whether they are reachable
// (a Redis store). /readyz calls it; stores without it are always reachable.
type Pinger interface {
	Ping(ctx context.Context) error
}

type readiness struct {
	Status string       `json:"status"`
	Config configStatus `json:"config"`
	Store  storeStatus  `json:"store"`
}

type configStatus struct {
	File     string    `json:"file,omitempty"`
	LoadedAt time.Time `json:"loaded_at"`
	Limiters int       `json:"limiters"`
	// LastReloadError is why the last reload was rejected; the
	// configuration loaded at LoadedAt keeps serving meanwhile.
	LastReloadError    string     `json:"last_reload_error,omitempty"`
	LastReloadFailedAt *time.Time `json:"last_reload_failed_at,omitempty"`
}

type storeStatus struct {
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
}

// handleReadyz serves GET /readyz: 200 when a configuration is loaded and
// the store answers, 503 otherwise (and while shutting down). A rejected
// reload does not make the service unready (the previous configuration
// serves), but it is reported in the detail.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) *httpError {
	set, st := s.limiters.Load(), s.state.Load()
	out := readiness{Status: "ready"}
	out.Config = configStatus{File: set.config.File, LoadedAt: st.loadedAt.UTC(), Limiters: len(set.names)}
	if st.err != nil {
		out.Config.LastReloadError = st.err.Error()
		at := st.failedAt.UTC()
		out.Config.LastReloadFailedAt = &at
	}
	out.Store.Reachable = true
	if p, ok := s.Store.(Pinger); ok {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		err := p.Ping(ctx)
		cancel()
		if err != nil {
			out.Store = storeStatus{Error: err.Error()}
		}
	}
	status := http.StatusOK
	select {
	case <-s.done:
		out.Status = "shutting down"
		status = http.StatusServiceUnavailable
	default:
		if !out.Store.Reachable {
			out.Status = "store unreachable"
			status = http.StatusServiceUnavailable
		}
	}
	writeJSON(w, status, out)
	return nil
}
