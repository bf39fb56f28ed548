package store

// ConfinedError is a store failure confined to a part of the store, such as
// one master of a Redis Cluster, that the store isolates itself (with a
// breaker per part). The decision is answered by the failure policy, but
// the breaker of the store as a whole (store/guard's) does not count the
// failure, so decisions whose keys live on the healthy parts go on being
// decided by the rules.
type ConfinedError struct {
	// Part names the part that failed, such as a node's address.
	Part string
	// Err is the failure.
	Err error
}

// Error returns Err's message.
func (e *ConfinedError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ConfinedError) Unwrap() error { return e.Err }
