package server

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
)

// breakerLog logs when a limiter's circuit breaker has closed: the breaker
// logs its opening itself, and its closing is seen here, by the first
// decision the rules make again after decisions of the failure policy while
// it was open. It adds an atomic load to a decision by the rules.
type breakerLog struct {
	limiter *floodgate.Limiter // set once built
	logger  *slog.Logger
	failing atomic.Bool  // decisions are being made by the failure policy
	opened  atomic.Bool  // and the breaker opened meanwhile
	since   atomic.Int64 // the first of them, in Unix nanoseconds
}

// observe notes one decision.
func (b *breakerLog) observe(e floodgate.Event) {
	if e.Mode != floodgate.ModeConsume && e.Mode != floodgate.ModePeek {
		return
	}
	if e.Decision.Reason == floodgate.ReasonStore {
		if !b.failing.Load() && b.failing.CompareAndSwap(false, true) {
			b.since.Store(time.Now().UnixNano())
		}
		if l := b.limiter; l != nil && l.Breaker() != floodgate.BreakerClosed {
			b.opened.Store(true)
		}
		return
	}
	if b.failing.Load() && b.failing.CompareAndSwap(true, false) && b.opened.Swap(false) {
		took := time.Since(time.Unix(0, b.since.Load())).Round(time.Millisecond)
		b.logger.Info("store circuit breaker closed: decisions are made by the rules again",
			"limiter", e.Limiter, "after", took.String())
	}
}

// observer returns the Observer of a limiter: metrics, the status page's
// figures (observe), and bl.
func (s *Server) observer(bl *breakerLog) floodgate.Observer {
	return func(ctx context.Context, e floodgate.Event) {
		s.observe(ctx, e)
		bl.observe(e)
	}
}
