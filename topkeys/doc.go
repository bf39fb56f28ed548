// Package topkeys answers "who is being limited right now": for each
// limiter and rule, the keys with the most denials, and separately the most
// decisions, over the last minutes, in memory that does not grow with the
// number of distinct keys.
//
// Plug a Tracker's Observe method into floodgate.Options.Observer (it is
// told of each decision by value, at no allocation), or call it from your
// own floodgate.Observer, and ask Top for the heaviest keys of a rule over a span of up to
// MaxSpan. Let the limiter sample admitted decisions for it
// (floodgate.Options.ObserveSample): 1 in 8 spares most admitted decisions
// the summaries' update, while every denial is still counted.
//
//	tops := topkeys.New(nil)
//	l, _ := floodgate.New("api", store, rules, &floodgate.Options{Observer: tops.Observe, ObserveSample: 8})
//	...
//	r, _ := tops.Top("api", "per-user", topkeys.Denials, 5*time.Minute, 10)
//
// Counts are estimates with a stated error: a denial count's true value
// lies between Count−Error and Count. Error is 0 while a rule sees no more
// distinct keys in a minute than the Tracker's capacity; it grows only under
// a flood of distinct keys, and a key whose share of the events stands out
// keeps a small error even then (see Tracker for the bound). An Event
// counts as its Weight (how many decisions a sampled Event stands for), and
// the Error of a sampled count covers the sampling too (see Entry).
//
// Memory is fixed by Options.Capacity, whatever the number of distinct
// keys; a Tracker is safe for concurrent use.
package topkeys
