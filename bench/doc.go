// Package bench compares floodgate's memory store with other Go rate
// limiters under one workload. It is a separate module so that the peers it
// imports never become dependencies of floodgate itself; see
// docs/benchmarks.md for the results and how to reproduce them.
package bench
