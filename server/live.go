package server

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/topkeys"
)

// live is what the service keeps about the decisions of the last minutes,
// for GET /v1/top and the status page: the top keys of every rule, and
// per-second decision counts by result for every limiter.
type live struct {
	tops  *topkeys.Tracker
	rates rates
}

// newLive returns the service's live state. Its top keys count every
// decision: the service's limiters tell their observer of each (no
// floodgate.Options.ObserveSample), as the metrics count each, and
// sampling would save tens of nanoseconds on a request that costs
// microseconds.
func newLive(clock floodgate.Clock) *live {
	return &live{tops: topkeys.New(&topkeys.Options{Clock: clock})}
}

// retain forgets the top keys of limiters and rules that the service no
// longer has, after a reload.
func (lv *live) retain(observed []observedLimiter) {
	lv.tops.Retain(func(limiter, rule string) bool {
		for _, l := range observed {
			if l.name == limiter {
				_, ok := l.Rule(rule)
				return ok
			}
		}
		return false
	})
}

// observe is every limiter's floodgate.Observer: the metrics' count, the
// top keys and the per-second counts.
func (s *Server) observe(ctx context.Context, e floodgate.Event) {
	s.metrics.observe(ctx, e)
	s.countSkipped(&e)
	if e.Mode != floodgate.ModeConsume && e.Mode != floodgate.ModePeek {
		return
	}
	s.live.tops.Observe(ctx, e)
	s.live.rates.add(e.Limiter, resultIndex(&e.Decision), time.Now().Unix())
}

// results are the values of floodgate_decisions_total's result label, in
// the order of a second's counts.
var results = [...]string{resultAllowed, resultDenied, resultShadowDenied, resultFailOpen, resultFailClosed}

func resultIndex(d *floodgate.Decision) int {
	r := result(d)
	for i, name := range results {
		if name == r {
			return i
		}
	}
	return 0
}

// rateSeconds is how many seconds of counts a limiter keeps.
const rateSeconds = 300

// rates are per-second decision counts by limiter and result, in a ring of
// rateSeconds seconds per limiter. The limiter list is copied on write,
// under mu; counting is two atomic operations, and a lock once a second.
type rates struct {
	mu       sync.Mutex
	limiters atomic.Pointer[[]*limiterRates]
}

type limiterRates struct {
	name string
	mu   sync.Mutex // serializes resetting a second
	ring [rateSeconds]second
}

// second is one second's counts.
type second struct {
	at atomic.Int64 // Unix seconds
	n  [len(results)]atomic.Int64
}

func (r *rates) limiter(name string) *limiterRates {
	if all := r.limiters.Load(); all != nil {
		for _, lr := range *all {
			if lr.name == name {
				return lr
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var old []*limiterRates
	if all := r.limiters.Load(); all != nil {
		old = *all
	}
	for _, lr := range old {
		if lr.name == name {
			return lr
		}
	}
	lr := &limiterRates{name: name}
	all := append(append(make([]*limiterRates, 0, len(old)+1), old...), lr)
	r.limiters.Store(&all)
	return lr
}

// add counts a decision of result index res at Unix second at.
func (r *rates) add(limiter string, res int, at int64) {
	lr := r.limiter(limiter)
	s := &lr.ring[at%rateSeconds]
	if s.at.Load() != at {
		lr.mu.Lock()
		if s.at.Load() != at {
			for i := range s.n {
				s.n[i].Store(0)
			}
			s.at.Store(at)
		}
		lr.mu.Unlock()
	}
	s.n[res].Add(1)
}

// series returns limiter's counts of the n whole seconds before Unix
// second now, oldest first, one slice per result.
func (r *rates) series(limiter string, now int64, n int) [len(results)][]int64 {
	var out [len(results)][]int64
	for i := range out {
		out[i] = make([]int64, n)
	}
	lr := r.limiter(limiter)
	for j := range n {
		at := now - int64(n) + int64(j)
		s := &lr.ring[((at%rateSeconds)+rateSeconds)%rateSeconds]
		if s.at.Load() != at {
			continue
		}
		for i := range out {
			out[i][j] = s.n[i].Load()
		}
	}
	return out
}

// countSkipped counts, for a decision of a configured limiter, each keyed
// rule the Event lacks: the request had no key for it, and it was skipped.
func (s *Server) countSkipped(e *floodgate.Event) {
	set := s.limiters.Load()
	if set == nil {
		return
	}
	for _, name := range set.keyed[e.Limiter] {
		if !slices.ContainsFunc(e.Rules(), func(r floodgate.RuleEvent) bool { return r.Rule == name }) {
			s.metrics.skipped.WithLabelValues(e.Limiter, name).Add(float64(e.Weight))
		}
	}
}
