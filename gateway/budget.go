package gateway

import (
	"time"

	"github.com/floodgate-go/floodgate"
)

// A budget is a spend limit in cost units (money, weighted tokens) over a
// long window: a calendar day or month in a time zone, or a rolling span.
// It is an ordinary rule, kept one of two ways:
//
//   - Exactly (calendar budgets, which are reservable): Reserve the most
//     the work can cost before it (floodgate.Limiter.Reserve, with the
//     request's other rules, all or nothing), then Settle with what it
//     used. Concurrent work never spends more than the budget, and a hold
//     nobody settles is given back by the store at its hold time.
//   - Cheaply: a read-only Peek before the work and a Record of its cost
//     after. Work that overlaps is checked against a budget that does not
//     yet count the others' cost, so the budget may be overspent by up to
//     the concurrency times the largest cost.
//
// A budget that is spent denies until its window rolls (calendar budgets)
// or enough spend ages out (rolling ones), with that exact RetryAfter. When
// the store cannot be read, the limiter's failure policy decides like any
// other decision: FailClosed denies, FailOpen admits, both with Reason
// store; the budget never reads as unspent.

// DailyBudget returns a reservable rule that holds each key (the
// attributes named by key, joined) to limit cost units per calendar day in
// loc (nil means UTC). The day runs from midnight to midnight in loc, so
// it lasts 23 or 25 hours across a daylight-saving change.
func DailyBudget(name string, limit int64, loc *time.Location, key ...string) floodgate.Rule {
	return floodgate.Rule{Name: name, Algorithm: floodgate.FixedWindow, Limit: limit, Align: floodgate.AlignDay, Location: loc, Key: key, Reservable: true}
}

// MonthlyBudget returns a reservable rule that holds each key to limit
// cost units per calendar month in loc (nil means UTC), from midnight on
// the first of the month to midnight on the first of the next.
func MonthlyBudget(name string, limit int64, loc *time.Location, key ...string) floodgate.Rule {
	return floodgate.Rule{Name: name, Algorithm: floodgate.FixedWindow, Limit: limit, Align: floodgate.AlignMonth, Location: loc, Key: key, Reservable: true}
}

// RollingBudget returns a rule that holds each key to limit cost units in
// any span of window, counted in 60 buckets (or the largest count under 60
// that divides window), so spend ages out a bucket at a time. It is kept
// the cheap way: reservations hold units of fixed windows only.
func RollingBudget(name string, limit int64, window time.Duration, key ...string) floodgate.Rule {
	return floodgate.Rule{Name: name, Algorithm: floodgate.SlidingWindow, Limit: limit, Window: window, Key: key}
}
