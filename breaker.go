package floodgate

import (
	ibreaker "github.com/floodgate-go/floodgate/internal/breaker"
	"github.com/floodgate-go/floodgate/store"
)

// breaker guards a limiter's store.
type breaker = ibreaker.Breaker

func newBreaker(o store.BreakerOptions) *breaker { return ibreaker.NewWith(o) }
