// Package floodgate is a rate-limiting engine: limiters made of named rules,
// each rule an algorithm with a limit per window for every key, all rules of a
// limiter ANDed with all-or-nothing consumption.
//
// The root package holds the domain (Limiter, Rule, Decision, Ticket) and the
// clock. The port stores implement is package store; stores live in their own
// packages, and store/memory is the embedded default. A decision is a result, not an error: errors are
// returned only for bad arguments, and store failures become decisions under
// the limiter's FailurePolicy.
//
// Time is kept at microsecond resolution: every duration a Decision reports is
// a whole number of microseconds, and retry-after values are exact at that
// resolution.
package floodgate
