package envoy

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Reservable limits. Envoy AI Gateway's calls are fixed: a check
// (hits_addend 0) before a request, and after its response stream a charge
// of the tokens it used (hits_addend N), whose answer Envoy ignores. Each
// check sees the budget as it was before the answers still streaming, so
// concurrent answers overspend it. A limit whose extension sets reserve
// (fixed windows only) turns the two calls into a reservation:
//
//   - a check reserves reserve units of the limit (floodgate.Limiter.Reserve)
//     for hold, with the request's other descriptors all or nothing, and is
//     OVER_LIMIT when they do not fit beside what is held;
//   - a charge on the same descriptor settles the oldest live hold of its
//     counter key, whoever reserved it (floodgate.Limiter.SettleOldest),
//     charging the units used in its place, or charges them alone when none
//     is live; it is never refused, and a refusal of another descriptor
//     does not undo it;
//   - a hold whose charge never comes (a stream cut off, a gateway that
//     died) lapses after hold, given back by the store itself.
//
// Holds are matched to charges per counter key, oldest first: one key's
// answers end in any order, and each charge ends one hold, so the units
// held on a key are always those of its answers still under way (up to
// the order in which they end).

// Reservations is told of what a Service's reservable limits do, for
// metrics (Options.Reservations). Its methods are called on the decision
// path, and must be quick and safe for concurrent use.
type Reservations interface {
	// Reserved is told of an admitted reservation, by its ticket
	// (floodgate.Outcome.Ticket): its held rules and keys, the units and
	// when they lapse.
	Reserved(t floodgate.Ticket)
	// SettledOldest is told of a charge on limiter's reservable rule for
	// key: what floodgate.Limiter.SettleOldest found (Settled: a live hold
	// was ended; Lapsed: none was, and the usage was charged alone), or the
	// error when the store could not apply it.
	SettledOldest(limiter, rule, key string, s floodgate.Settlement, err error)
}

// reservation is what a descriptor of cost c whose limit is lf reserves:
// reserve units held for hold at a check of a reservable limit, and
// nothing otherwise.
func reservation(lf *leaf, c int64) (int64, time.Duration) {
	if c == 0 && lf.reserve > 0 {
		return lf.reserve, lf.hold
	}
	return 0, 0
}

// reserved tells the Reservations of g's reservation, when it holds one.
func (st *state) reserved(g *group) {
	if r := st.opts.Reservations; r != nil && g.reserve > 0 && g.out.Allowed && !g.refunded {
		r.Reserved(g.out.Ticket())
	}
}

// settle settles the oldest hold of descriptor i's reservable limit lf on
// key with n units used, and writes its status: a peek at one unit
// afterwards, as a record answers (OK while one more unit fits).
func (st *state) settle(ctx context.Context, resp response, i int, l *floodgate.Limiter, lf *leaf, key string, n int64) {
	d := st.settleOldest(ctx, l, lf, key, n)
	ds := resp.status(i)
	ds.Code = code(d.Allowed)
	if d.Reason == floodgate.ReasonStore {
		if !d.Allowed {
			resp.setLimit(i, lf)
			resp.setReset(i, st.alignedReset(lf))
		}
		return // no figure, as in failedStatus
	}
	resp.setLimit(i, lf)
	ds.LimitRemaining = clamp32(d.Remaining)
	resp.setReset(i, d.ResetAfter)
}

// settleOldest settles the oldest live hold of lf on key with n units used
// (or charges them alone when none is live), tells the Reservations, and
// returns a peek at one unit afterwards. A settlement that fails is logged
// by the limiter; the hold lapses by itself.
func (st *state) settleOldest(ctx context.Context, l *floodgate.Limiter, lf *leaf, key string, n int64) floodgate.Outcome {
	attrs := floodgate.Attributes{lf.rule: key}
	s, err := l.SettleOldest(ctx, attrs, n)
	if r := st.opts.Reservations; r != nil {
		r.SettledOldest(l.Name(), lf.rule, key, s, err)
	}
	o, _ := l.Decide(ctx, floodgate.ModePeek, attrs, 1)
	return o
}
