// Package httplimit is floodgate's net/http middleware: it asks a limiter
// about every request and answers denied ones the way HTTP clients expect.
//
// A Middleware pairs a floodgate.Limiter with KeyFuncs that turn a request
// into the attributes the limiter's rules are keyed on (ClientIP, Header,
// FromContext, Route, Join). Admitted requests reach the next handler with
// quota headers set; denied ones get 429 Too Many Requests with:
//
//   - Retry-After: whole seconds, rounded up, at least 1, after which the same
//     request would be admitted;
//   - Cache-Control: no-store;
//   - RateLimit-Policy and RateLimit, one structured-field item per applied
//     rule, as in draft-ietf-httpapi-ratelimit-headers-11:
//     RateLimit-Policy: "per-user";q=20;w=1 and RateLimit: "per-user";r=0;t=1
//     (t is rounded up). A token bucket or GCRA rule states its capacity as
//     q and the time to refill it as w (100/s with burst 200 is q=200;w=2),
//     so r <= q; a rule that denied the request has as t the time until
//     the request would be admitted, the same instant as Retry-After;
//   - an RFC 9457 application/problem+json body of type
//     ProblemQuotaExceeded naming the violated policies,
//
// or whatever the route's OnLimited handler writes. When the limiter's store
// fails, a FailOpen limiter lets the request through without quota headers
// and a FailClosed one answers 503 Service Unavailable (or 429, see
// Options.FailureStatus) with Retry-After and no quota headers.
//
// # Order
//
// Put the middleware after authentication, so the user and tenant it keys
// on are known, and after access checks, so a request refused for access
// never moves a counter: authenticate → authorise → limit → handler. Limits
// keyed on the client address alone can run first, to shed floods before
// authentication costs anything.
//
// # Counting
//
// By default every admitted request counts. Options.Count counts only
// failures (a login limit that must not lock out users who type their
// password right) or only successes, refunding the others through their
// decision's ticket once the handler has answered. Concurrency rules have
// their lease released when the handler returns. Options.ChargeAfter admits
// a request when one unit is still available and charges, after the handler
// returns, the usage it reported with AddCost (LLM tokens); a Concurrency
// rule then holds its lease for the handler, and the usage goes to the
// other rules (an in-flight cap plus tokens per minute).
//
// Options.Reserve is the exact way to keep a budget: each request reserves
// the most it can use (an LLM call's max_tokens) on the limiter's reservable
// rules before the handler runs, so that concurrent requests never spend
// more than the budget, and its reservation is settled with the usage the
// handler reported with AddCost when the handler returns.
//
// Trusted internal sub-requests marked with WithSubrequest pass middlewares
// of kind Identity without counting; middlewares of kind Cost still count
// them.
package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/admission"
	"github.com/floodgate-go/floodgate/internal/quota"
)

// Kind says what a middleware's limiter limits, which decides whether
// sub-requests marked with WithSubrequest are counted.
type Kind uint8

const (
	// Identity limiters limit who is calling (per IP, user, tenant). They
	// let marked sub-requests through uncounted: the outer request paid.
	Identity Kind = iota
	// Cost limiters limit what is spent (tokens, money, bytes). They count
	// every request, marked or not.
	Cost
)

// Count says which admitted requests keep their charge.
type Count uint8

const (
	// CountAll charges every admitted request (the default).
	CountAll Count = iota
	// CountFailures refunds requests that succeeded, so only failures
	// count: a login limit on wrong passwords.
	CountFailures
	// CountSuccesses refunds requests that failed, so only successes
	// count.
	CountSuccesses
)

// Options configure a Middleware. Only Attributes is usually needed.
type Options struct {
	// Attributes name the request attributes the limiter's rules are keyed
	// on, each with the KeyFunc that extracts it. Every attribute a rule
	// lists in Rule.Key must be here.
	Attributes map[string]KeyFunc
	// Kind is Identity (the default) or Cost; see WithSubrequest.
	Kind Kind
	// Count selects which admitted requests count; default CountAll.
	Count Count
	// Failed classifies a response status for Count; nil means status >=
	// 400 is a failure. A handler that panics has failed.
	Failed func(status int) bool
	// ChargeAfter admits a request when the limiter would admit one unit
	// now, charging nothing up front, and after the handler returns records
	// what the handler reported with AddCost (Limiter.Record). Use it for
	// usage known only once the work is done. Concurrency rules take their
	// lease up front and hold it until the handler returns; the usage is
	// recorded into the other rules.
	ChargeAfter bool
	// Reserve, when set, makes every request a reservation
	// (floodgate.Limiter.Reserve): it returns the most units the request
	// can use (an LLM call's max_tokens; less than 1 is taken as 1), which
	// are held on the limiter's reservable rules (Rule.Reservable) for
	// Hold, with one unit of its other rules, all or nothing. Concurrent
	// requests then never spend more than a budget. When the handler
	// returns, the reservation is settled with what it reported with
	// AddCost, failed or not (nothing reported releases it), and its
	// Concurrency leases are released. A reservation that is never settled
	// (the process died) lapses after Hold. It cannot be combined with
	// ChargeAfter or Count.
	Reserve func(r *http.Request) int64
	// Hold is how long a reservation's units stay held unless settled
	// first; required with Reserve, and at least 1ms. Choose it longer
	// than the slowest request: usage settled after the hold has lapsed
	// is still charged, and may then overspend.
	Hold time.Duration
	// OnLimited, when set, answers requests the rules denied instead of the
	// default problem+json body. Retry-After, Cache-Control and the quota
	// headers are already set; DecisionFrom gives it the decision, with
	// every rule's result. It should answer 429.
	OnLimited http.Handler
	// FailureStatus is the status of requests denied because the store
	// failed under FailClosed: http.StatusServiceUnavailable (the default)
	// or http.StatusTooManyRequests.
	FailureStatus int
	// OmitQuotaHeaders leaves out RateLimit-Policy and RateLimit (and
	// the legacy headers). Requests then cost less: with no Concurrency
	// rule, Count, ChargeAfter or OnLimited, a one-rule limiter is asked
	// with Limiter.Allow, which builds no per-rule results.
	OmitQuotaHeaders bool
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset for the
	// binding rule to the quota headers; with OmitQuotaHeaders it is an
	// error.
	LegacyHeaders bool
	// Clock is the time X-RateLimit-Reset is counted from; nil means the
	// system clock. Pass the limiter's clock.
	Clock floodgate.Clock
}

// Middleware limits requests with a floodgate.Limiter. Create it with New;
// it is safe for concurrent use.
type Middleware struct {
	limiter       *floodgate.Limiter
	gate          *admission.Gate
	attrs         []namedKey
	kind          Kind
	count         Count
	failed        func(int) bool
	chargeAfter   bool
	reserve       func(*http.Request) int64 // Options.Reserve
	onLimited     http.Handler
	failureStatus int
	withQuota     bool
	legacy        bool
	clock         floodgate.Clock
	quota         *quota.Formatter
	anyLeases     bool      // a rule's units are leases (Concurrency)
	pool          sync.Pool // floodgate.Attributes
}

type namedKey struct {
	name string
	f    KeyFunc
}

// New returns a middleware that limits requests with l. It returns an error
// for a nil limiter, a nil KeyFunc, a rule keyed on an attribute that no
// KeyFunc supplies, or an unknown option value. opts may be nil only for a
// limiter whose rules have no Key attributes.
func New(l *floodgate.Limiter, opts *Options) (*Middleware, error) {
	if l == nil {
		return nil, errors.New("httplimit: New: limiter must not be nil")
	}
	if opts == nil {
		opts = &Options{}
	}
	m := &Middleware{
		limiter:       l,
		kind:          opts.Kind,
		count:         opts.Count,
		failed:        opts.Failed,
		chargeAfter:   opts.ChargeAfter,
		reserve:       opts.Reserve,
		onLimited:     opts.OnLimited,
		failureStatus: opts.FailureStatus,
		withQuota:     !opts.OmitQuotaHeaders,
		legacy:        opts.LegacyHeaders,
		clock:         opts.Clock,
		quota:         quota.New(l),
	}
	where := fmt.Sprintf("httplimit: limiter %q", l.Name())
	if m.kind > Cost {
		return nil, fmt.Errorf("%s: unknown Kind %d", where, m.kind)
	}
	if m.count > CountSuccesses {
		return nil, fmt.Errorf("%s: unknown Count %d", where, m.count)
	}
	if m.chargeAfter && m.count != CountAll {
		return nil, fmt.Errorf("%s: ChargeAfter charges after the handler; it cannot be combined with Count", where)
	}
	switch {
	case m.reserve != nil && opts.Hold == 0:
		return nil, fmt.Errorf("%s: Reserve needs a Hold: how long a reservation's units stay held unless settled", where)
	case m.reserve == nil && opts.Hold != 0:
		return nil, fmt.Errorf("%s: Hold is the hold of reservations, which only Reserve makes", where)
	case m.reserve != nil && m.count != CountAll:
		return nil, fmt.Errorf("%s: a reservation is settled with the usage after the handler; it cannot be combined with Count", where)
	}
	if opts.LegacyHeaders && opts.OmitQuotaHeaders {
		return nil, fmt.Errorf("%s: LegacyHeaders adds to the quota headers, which OmitQuotaHeaders leaves out: set one of them", where)
	}
	switch m.failureStatus {
	case 0:
		m.failureStatus = http.StatusServiceUnavailable
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
	default:
		return nil, fmt.Errorf("%s: FailureStatus must be 503 or 429, got %d", where, m.failureStatus)
	}
	if m.failed == nil {
		m.failed = func(status int) bool { return status >= 400 }
	}
	if m.clock == nil {
		m.clock = floodgate.SystemClock{}
	}
	for name, f := range opts.Attributes {
		if name == "" {
			return nil, fmt.Errorf("%s: attribute name must not be empty", where)
		}
		if f == nil {
			return nil, fmt.Errorf("%s: attribute %q: KeyFunc must not be nil", where, name)
		}
		m.attrs = append(m.attrs, namedKey{name, f})
	}
	for _, r := range l.Rules() {
		m.anyLeases = m.anyLeases || r.Algorithm == floodgate.Concurrency
		if r.KeyFunc != nil {
			continue
		}
		for _, a := range r.Key {
			if opts.Attributes[a] == nil {
				return nil, fmt.Errorf("%s: rule %q is keyed on attribute %q, which no KeyFunc in Options.Attributes supplies", where, r.Name, a)
			}
		}
	}
	var err error
	m.gate, err = admission.New(l, admission.Options{
		// Quota headers name every rule; DecisionFrom gives handlers
		// the whole outcome.
		Rules:       m.withQuota || m.onLimited != nil || m.chargeAfter || m.reserve != nil,
		Refunds:     m.count != CountAll,
		ChargeAfter: m.chargeAfter,
		Hold:        opts.Hold,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	n := len(m.attrs)
	m.pool.New = func() any { return make(floodgate.Attributes, n) }
	return m, nil
}

// Limiter returns the middleware's limiter.
func (m *Middleware) Limiter() *floodgate.Limiter { return m.limiter }

// Handler wraps next so that every request is limited before it reaches
// next. Its signature fits routers' Use methods (chi's r.Use(m.Handler)).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// Attributes returns the request's attributes as the middleware's KeyFuncs
// extract them, for calls to the limiter outside the middleware.
func (m *Middleware) Attributes(r *http.Request) floodgate.Attributes {
	attrs := make(floodgate.Attributes, len(m.attrs))
	m.fill(attrs, r)
	return attrs
}

// fill sets every attribute of r in attrs. Absent ones are deleted, so a
// pooled map needs no clearing between requests.
func (m *Middleware) fill(attrs floodgate.Attributes, r *http.Request) {
	for _, a := range m.attrs {
		if v := a.f(r); v != "" {
			attrs[a.name] = v
		} else {
			delete(attrs, a.name)
		}
	}
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	if m.kind == Identity && IsSubrequest(ctx) {
		next.ServeHTTP(w, r)
		return
	}
	attrs := m.pool.Get().(floodgate.Attributes)
	defer m.release(attrs)
	m.fill(attrs, r)

	var a admission.Admission
	if m.reserve != nil {
		a = m.gate.Reserve(ctx, attrs, m.reserve(r))
	} else {
		a = m.gate.Admit(ctx, attrs)
	}
	d := &a.Outcome
	h := w.Header()
	if !d.Allowed {
		h.Set("Cache-Control", "no-store")
		if d.Reason == floodgate.ReasonInvalid {
			// A request the limiter cannot decide (a key attribute missing
			// under Options.RequireKeys): the server is set up wrong.
			writeInvalid(w, d.Err)
			return
		}
		if d.Reason == floodgate.ReasonStore {
			h.Set(HeaderRetryAfter, strconv.FormatInt(quota.Seconds(d.RetryAfter), 10))
			writeUnavailable(w, m.failureStatus)
			return
		}
		if m.withQuota {
			m.writeQuota(h, d)
		}
		if !d.Never {
			h.Set(HeaderRetryAfter, strconv.FormatInt(quota.Seconds(d.RetryAfter), 10))
		}
		if m.onLimited != nil {
			st := &state{decision: heapCopy(d)}
			m.onLimited.ServeHTTP(w, r.WithContext(withState(ctx, st, false)))
			return
		}
		writeDenied(w, &a)
		return
	}
	if m.withQuota && d.Reason != floodgate.ReasonStore {
		m.writeQuota(h, d)
		if a.Lease.Allowed && a.Lease.Reason != floodgate.ReasonStore {
			m.writeQuota(h, &a.Lease)
		}
	}

	switch {
	case m.chargeAfter, m.reserve != nil:
		// The usage the handler reports is recorded, or settles the
		// reservation.
		st := &state{decision: heapCopy(d)}
		defer func() { a.End(ctx, false, st.cost.Load()) }()
		next.ServeHTTP(w, r.WithContext(withState(ctx, st, true)))
	case m.count != CountAll:
		sw := &statusWriter{ResponseWriter: w}
		done := false
		defer func() {
			status := sw.code()
			if !done {
				status = http.StatusInternalServerError // the handler panicked
			}
			failed := m.failed(status)
			a.End(ctx, failed == (m.count == CountSuccesses), 0)
		}()
		next.ServeHTTP(sw, r)
		done = true
	case m.anyLeases:
		defer a.End(ctx, false, 0) // releases the leases
		next.ServeHTTP(w, r)
	default:
		next.ServeHTTP(w, r)
	}
}

// heapCopy copies an outcome that must outlive the stack frame, so that the
// common path keeps its own on the stack.
func heapCopy(o *floodgate.Outcome) *floodgate.Outcome {
	c := new(floodgate.Outcome)
	*c = *o
	return c
}

// release returns attrs to the pool. Their values stay until the next
// fill overwrites them; only the middleware's own names are ever set.
func (m *Middleware) release(attrs floodgate.Attributes) {
	m.pool.Put(attrs)
}
