// Package topkeys answers "who is being limited right now": for each
// limiter and rule, the keys with the most denials, and separately the most
// decisions, over the last minutes, in memory that does not grow with the
// number of distinct keys.
//
// A Tracker is a floodgate Observer: plug its Observe method into
// floodgate.Options.Observer (or call it from your own observer) and ask
// Top for the heaviest keys of a rule over a span of up to MaxSpan.
//
//	tops := topkeys.New(nil)
//	l, _ := floodgate.New("api", store, rules, &floodgate.Options{Observer: tops.Observe})
//	...
//	r, _ := tops.Top("api", "per-user", topkeys.Denials, 5*time.Minute, 10)
//
// Counts are estimates with a stated error: a denial count's true value
// lies between Count−Error and Count. Error is 0 while a rule sees no more
// distinct keys in a minute than the Tracker's capacity; it grows only under
// a flood of distinct keys, and a key whose share of the events stands out
// keeps a small error even then (see Tracker for the bound). Decisions are
// sampled, 1 in 8 by default, so that observing an admitted decision costs
// next to nothing; their counts are scaled back and their Error covers the
// sampling too (see Entry).
//
// Memory is fixed by Options.Capacity, whatever the number of distinct
// keys; a Tracker is safe for concurrent use.
package topkeys
