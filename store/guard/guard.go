// Package guard is the policy a remote store needs, as a store.Store
// decorator: a deadline on every call, a circuit breaker that answers at
// once while the store is down, and an optional fallback store that
// decides in its place meanwhile, with what the fallback charged handed
// back to the store once it answers again.
//
//	redisStore, _ := redis.New(nil)
//	guarded, _ := guard.New(redisStore, nil) // 100ms deadline, default breaker
//	lim, _ := floodgate.New("api", guarded, rules, nil)
//
// A call the guard refuses or that fails returns an error, and the
// limiter's failure policy decides (a store.RetryError says when the
// breaker lets a call through again). In-process stores (store/memory)
// need no guard.
package guard

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/breaker"
	"github.com/floodgate-go/floodgate/store"
)

// DefaultTimeout is the default deadline of one store call: about five
// times the p99 of a Redis decision under load on a busy 2-CPU machine
// (18.8 ms at 9,500 decisions/s, 64 callers), and above the stalls such a
// machine has without a fault (a 50 ms deadline timed out 132 of 2.3
// million calls in 4 minutes) and a short Redis stall (86 ms), which then
// make decisions wait rather than be decided by policy. See "Choosing the
// deadline" in docs/operations.md.
const DefaultTimeout = 100 * time.Millisecond

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// Timeout is the deadline of each call; 0 means DefaultTimeout. A
	// caller whose own deadline comes first keeps it.
	Timeout time.Duration
	// Breaker tunes the circuit breaker.
	Breaker store.BreakerOptions
	// Fallback, when set, decides in place of the failure policy whenever
	// the store cannot answer a consume, peek or record (a failed call, or
	// the breaker open): the batch is applied to Fallback instead,
	// typically a memory store holding each instance's share of the limits
	// (see store/share). The breaker alone decides when the store is back.
	// What the fallback charged is then handed back: recorded into the
	// store's current windows (what is still within its rule's window), so
	// that the window in which the store returns is not spent twice. The
	// handback remembers up to 100,000 keys.
	Fallback store.Store
	// Clock times the breaker; nil means the wall clock. Tests that drive
	// limiters on a manual clock give it here too.
	Clock interface{ Now() time.Time }
	// Logger receives the breaker's openings and closings, the fallback's
	// decisions (at most a line a second) and the handbacks; nil means
	// slog.Default().
	Logger *slog.Logger
	// Name names the guarded store in the log lines, such as "redis".
	Name string
}

// Store guards an inner store (see the package documentation). It is safe
// for concurrent use.
type Store struct {
	inner    store.Store
	fallback store.Store
	timeout  time.Duration
	breaker  *breaker.Breaker
	handback *handback // what the fallback charged; nil without one
	clock    interface{ Now() time.Time }
	logger   *slog.Logger
	name     string

	lastLog    atomic.Int64 // when the fallback last logged (ns)
	suppressed atomic.Int64
}

var _ store.Store = (*Store)(nil)

// New returns inner guarded as opts say (nil for the defaults). It returns
// an error naming the option out of range.
func New(inner store.Store, opts *Options) (*Store, error) {
	if inner == nil {
		return nil, errors.New("guard: inner store must not be nil")
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.Timeout < 0 {
		return nil, errors.New("guard: timeout must not be negative")
	}
	if err := opts.Breaker.Check(); err != nil {
		return nil, err
	}
	s := &Store{
		inner: inner, fallback: opts.Fallback, timeout: opts.Timeout,
		breaker: breaker.NewWith(opts.Breaker), clock: opts.Clock, logger: opts.Logger, name: opts.Name,
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.clock == nil {
		s.clock = wallClock{}
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.fallback != nil {
		s.handback = &handback{}
	}
	return s, nil
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Unwrap returns the store s guards.
func (s *Store) Unwrap() store.Store { return s.inner }

// State returns the state of the breaker.
func (s *Store) State() store.BreakerState { return s.breaker.State() }

// Apply applies b to the inner store within the deadline, unless the
// breaker is open; when that fails and b is a decision (consume, peek or
// record), to the fallback, if there is one.
func (s *Store) Apply(ctx context.Context, b *store.Batch) error {
	err := s.call(ctx, b)
	if err == nil || s.fallback == nil || b.Mode > store.Record {
		return err
	}
	if ferr := s.fallback.Apply(ctx, b); ferr != nil {
		return errors.Join(err, ferr) // the failure policy's, naming both
	}
	s.logFallback(ctx, err)
	s.handback.note(b)
	return nil
}

// call applies b to the inner store, with the deadline and the breaker.
func (s *Store) call(ctx context.Context, b *store.Batch) error {
	if now := s.clock.Now().UnixNano(); !s.breaker.Allow(now) {
		return &store.RetryError{Err: store.ErrBreakerOpen, RetryIn: s.breaker.RetryIn(now)}
	}
	// A caller whose own deadline comes first (a gRPC call from Envoy, an
	// HTTP request with a timeout) already bounds the call: deriving a
	// context would cost a timer and allocations for the same deadline.
	var err error
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.timeout {
		err = s.inner.Apply(ctx, b)
	} else {
		cctx, cancel := context.WithTimeout(ctx, s.timeout)
		err = s.inner.Apply(cctx, b)
		cancel()
	}
	if err != nil {
		if ctx.Err() != nil {
			s.breaker.Abandon()
			return err // the caller gave up: not the store's fault
		}
		if ce := (*store.ConfinedError)(nil); errors.As(err, &ce) {
			// The store isolates the failed part itself; the rest of it
			// answers. A probe that met it brought no verdict.
			s.breaker.Abandon()
			return err
		}
		now := s.clock.Now().UnixNano()
		if s.breaker.Failure(now) {
			s.logger.Warn("floodgate: store circuit breaker opened", "store", s.name, "err", err)
		}
		if retry := s.breaker.RetryIn(now); retry > 0 {
			return &store.RetryError{Err: err, RetryIn: retry}
		}
		return err
	}
	if s.breaker.Success() {
		s.logger.Info("floodgate: store circuit breaker closed: decisions are made by the rules again", "store", s.name)
	}
	if s.handback != nil && s.handback.pending.Load() {
		s.handBack()
	}
	return nil
}

// logFallback logs at most one line a second of the decisions the
// fallback made, with the count of the ones it held back.
func (s *Store) logFallback(ctx context.Context, err error) {
	ns := s.clock.Now().UnixNano()
	last := s.lastLog.Load()
	if ns-last < int64(time.Second) || !s.lastLog.CompareAndSwap(last, ns) {
		s.suppressed.Add(1)
		return
	}
	s.logger.WarnContext(ctx, "floodgate: store failed; decided on the fallback store",
		"store", s.name, "err", err, "suppressed", s.suppressed.Swap(0))
}
