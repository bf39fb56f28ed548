// Package gateway is a kit for LLM and API gateways built on floodgate's
// limiters: a Selector that chooses among capped upstream routes and fails
// over, Weights that price tokens by class, RecordUsage that records the tokens
// of a response once they are known, and long-window spend budgets.
//
// Everything here is made of floodgate's public API: a route is a
// floodgate.Limiter holding its caps, choosing it is one AllowN, settling
// is a Refund and a Record, and a budget is an ordinary floodgate.Rule.
package gateway
