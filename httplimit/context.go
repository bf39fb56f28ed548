package httplimit

import (
	"context"
	"sync/atomic"

	"github.com/floodgate-go/floodgate"
)

type subrequestKey struct{}

type stateKey struct{}

// WithSubrequest marks ctx as belonging to a trusted internal sub-request,
// such as one part of a batch whose outer request has already been limited.
// Middlewares of kind Identity let marked requests through without counting
// them; middlewares of kind Cost count them as usual, so a batch cannot
// launder spend.
//
// Only the application sets the mark, after deciding the request is its own;
// no header or other client input can set it.
func WithSubrequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, subrequestKey{}, true)
}

// IsSubrequest reports whether ctx carries the WithSubrequest mark.
func IsSubrequest(ctx context.Context) bool {
	v, _ := ctx.Value(subrequestKey{}).(bool)
	return v
}

// state is what a middleware shares with the handler through the request
// context.
type state struct {
	decision *floodgate.Outcome
	cost     atomic.Int64
}

// AddCost adds n units to the usage the request is charged for after its
// handler returns, for middlewares with Options.ChargeAfter or
// Options.Reserve set (an LLM route reports the tokens it used; a
// reservation is settled with them). It reports whether such a middleware
// is handling the request. When several are, each is charged.
func AddCost(ctx context.Context, n int64) bool {
	found := false
	for {
		st, ok := ctx.Value(stateKey{}).(*stateLink)
		if !ok {
			return found
		}
		if st.charge {
			st.s.cost.Add(n)
			found = true
		}
		ctx = st.parent
	}
}

// DecisionFrom returns the decision of the innermost rate-limit middleware
// that made one available, with every applied rule's result: to an
// OnLimited handler, and to handlers behind a ChargeAfter or Reserve
// middleware. It is the caller's to keep.
func DecisionFrom(ctx context.Context) (*floodgate.Outcome, bool) {
	st, ok := ctx.Value(stateKey{}).(*stateLink)
	if !ok || st.s.decision == nil {
		return nil, false
	}
	return st.s.decision, true
}

// stateLink chains the states of stacked middlewares, innermost first.
type stateLink struct {
	s      *state
	charge bool
	parent context.Context
}

func withState(ctx context.Context, s *state, charge bool) context.Context {
	return context.WithValue(ctx, stateKey{}, &stateLink{s: s, charge: charge, parent: ctx})
}
