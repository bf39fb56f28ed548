package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/gateway"
)

// Reservations over the HTTP API: POST /v1/check with "reserve" holds
// units of a limiter's reservable rules (floodgate.Limiter.Reserve) and
// answers the reservation's sealed ticket; POST /v1/settle ends it with the
// units used (0 releases it). An Envoy domain's reservable limits reserve
// as their file says, at a check of cost 0 (envoy.Service.Decide).

// reserveRequest is the "reserve" object of POST /v1/check.
type reserveRequest struct {
	// Units is the most the work can use: what is held.
	Units *int64 `json:"units"`
	// Hold is how long the units stay held unless settled first, as a Go
	// duration ("10m").
	Hold string `json:"hold"`
}

// readReserve checks req's reservation and sets it in a.
func (s *Server) readReserve(a *decisionArgs, req *decisionRequest) *httpError {
	rr := req.Reserve
	switch {
	case a.l == nil:
		return badRequest(fmt.Sprintf("reserve: %q is an Envoy domain's limiter, whose limits reserve as its file configures them (floodgate: {reserve, hold}) at a check of cost 0", a.name))
	case req.Peek:
		return badRequest("reserve and peek: set one, not both")
	case req.Cost != nil && *req.Cost != 1:
		return badRequest(fmt.Sprintf("cost: a reservation charges the limiter's other rules 1 unit each; leave cost out, got %d", *req.Cost))
	case rr.Units == nil:
		return badRequest("reserve.units: must be set: the most units the work can use")
	case *rr.Units < 1:
		return badRequest(fmt.Sprintf("reserve.units: must be at least 1, got %d", *rr.Units))
	case rr.Hold == "":
		return badRequest(`reserve.hold: must be set: how long the units stay held unless settled, a duration such as "10m"`)
	}
	hold, err := time.ParseDuration(rr.Hold)
	switch {
	case err != nil:
		return badRequest(fmt.Sprintf(`reserve.hold: %q is not a duration such as "10m"`, rr.Hold))
	case hold < time.Millisecond:
		return badRequest(fmt.Sprintf("reserve.hold: must be at least 1ms, got %v", hold))
	case !slices.ContainsFunc(a.l.Rules(), func(r floodgate.Rule) bool { return r.Reservable }):
		return badRequest(fmt.Sprintf("reserve: limiter %q has no reservable rule (a fixed_window rule with reservable: true)", a.name))
	}
	a.units, a.hold = *rr.Units, hold
	return nil
}

// reserve answers POST /v1/check with a reservation: the decision, and
// when admitted the reservation's sealed ticket and when its holds lapse.
func (s *Server) reserve(w http.ResponseWriter, r *http.Request, a *decisionArgs) *httpError {
	o, err := a.l.Reserve(r.Context(), a.attrs, a.units, a.hold)
	if err != nil {
		return badRequest(err.Error())
	}
	s.traceDecision(r.Context(), a.l.Name(), len(o.Rules), o.Allowed)
	t := o.Ticket()
	ticket, e := s.seal(t)
	if e != nil {
		return e
	}
	s.metrics.holds.Reserved(t)
	out := s.respond(&o.Decision, o.Rules, ticket)
	if t.Valid() {
		out.LapsesAfterMS = int64(lapsesAfter(&o, a.hold) / time.Millisecond)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// lapsesAfter is when the holds of o, an admitted reservation, lapse: its
// hold, or the end of a held rule's window if that comes first.
func lapsesAfter(o *floodgate.Outcome, hold time.Duration) time.Duration {
	for _, e := range o.Ticket().Entries {
		for _, r := range o.Rules {
			if r.Name == e.Rule && r.ResetAfter > 0 {
				hold = min(hold, r.ResetAfter)
			}
		}
	}
	return hold
}

// settleRequest is the body of POST /v1/settle.
type settleRequest struct {
	Ticket string `json:"ticket"`
	// Used is the units the work used; 0 releases the reservation.
	Used *int64 `json:"used"`
	// Usage, instead, counts tokens by class, used at their weighted
	// cost (token_classes).
	Usage map[string]int64 `json:"usage"`
}

// SettleResponse is the answer of POST /v1/settle. Its shape is a contract
// (docs/http-api.md).
type SettleResponse struct {
	// Settlement is "settled" (the holds were there), "lapsed" (a hold had
	// lapsed; the usage was charged all the same) or "already_settled"
	// (nothing changed).
	Settlement string `json:"settlement"`
}

// handleSettle serves POST /v1/settle: ends a reservation with the units
// its work used, in the place of its holds. Settling twice, or after the
// holds lapsed, is harmless and says so.
func (s *Server) handleSettle(w http.ResponseWriter, r *http.Request) *httpError {
	var req settleRequest
	limit := s.refundBodyBytes()
	if e := decodeJSON(http.MaxBytesReader(w, r.Body, limit), &req, limit); e != nil {
		return e
	}
	switch {
	case req.Ticket == "":
		return badRequest("ticket: must be set")
	case req.Used != nil && req.Usage != nil:
		return badRequest("used and usage: set one, not both")
	case req.Usage != nil:
		weights := s.limiters.Load().gateway.weights
		if len(weights) == 0 {
			return badRequest("usage: no token_classes are configured; settle with used instead")
		}
		c, err := weights.Cost(gateway.Usage(req.Usage))
		if err != nil {
			return badRequest("usage: " + trimPrefix(err))
		}
		req.Used = &c
	case req.Used == nil:
		return badRequest("used: must be set: the units the work used (0 releases the reservation), or usage by token class")
	case *req.Used < 0:
		return badRequest(fmt.Sprintf("used: must not be negative, got %d", *req.Used))
	}
	t, err := openTicket(s.secret, req.Ticket)
	if err == nil && t.Until.IsZero() {
		err = errors.New("not a reservation's; refund it with POST /v1/refund")
	}
	if err != nil {
		s.metrics.settlements.WithLabelValues("", "rejected").Inc()
		return invalidTicket(err.Error())
	}
	l := s.refunder(t.Limiter)
	if l == nil {
		return &httpError{status: http.StatusNotFound, kind: kindUnknownLimiter,
			detail: fmt.Sprintf("ticket: issued by limiter %q, which is not configured now; its holds lapse by themselves", t.Limiter)}
	}
	// The settlement outlives the request: a client that hangs up must
	// not leave the usage uncharged.
	st, err := l.Settle(context.WithoutCancel(r.Context()), t, *req.Used)
	if err != nil {
		s.metrics.settlements.WithLabelValues(t.Limiter, "failed").Inc()
		return &httpError{status: http.StatusServiceUnavailable, kind: kindStore,
			detail: "the store could not settle the reservation: " + err.Error() + "; settling it again is safe, and its holds lapse by themselves"}
	}
	s.metrics.settlements.WithLabelValues(t.Limiter, st.String()).Inc()
	s.metrics.holds.Settled(t)
	writeJSON(w, http.StatusOK, SettleResponse{Settlement: st.String()})
	return nil
}
