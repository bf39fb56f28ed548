package redis

import "github.com/floodgate-go/floodgate/store"

// StateKey is the key that holds the state of a rule key of a limiter's
// rule (scope "limiter/rule"), for the tests of package redis_test.
func (s *Store) StateKey(scope, key string, alg store.Algorithm) string {
	return s.keyOf(scope, key, suffix[alg])
}
