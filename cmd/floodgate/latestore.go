package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redis"
)

// lateStore is a Redis store that could not connect when the service
// started. It dials again every second until it connects; until then every
// call fails, so the limiters' fallback decides (floodgate serve starts
// with one only when store.redis.fallback is set).
type lateStore struct {
	s       atomic.Pointer[redis.Store]
	lastErr atomic.Pointer[error] // redacted
	hide    func(string) string
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// dialLater returns a lateStore dialling opts in the background; err is
// the first dial's error. hide takes the secrets out of an error's text
// before Ping reports it (on /readyz).
func dialLater(opts *redis.Options, err error, hide func(string) string, logger *slog.Logger) *lateStore {
	l := &lateStore{hide: hide, stop: make(chan struct{}), done: make(chan struct{})}
	l.failed(err)
	go l.dial(opts, logger)
	return l
}

// failed keeps err, its secrets hidden, as the last dial's error.
func (l *lateStore) failed(err error) {
	hidden := errors.New(l.hide(err.Error()))
	l.lastErr.Store(&hidden)
}

func (l *lateStore) dial(opts *redis.Options, logger *slog.Logger) {
	defer close(l.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		s, err := redis.New(opts)
		if err != nil {
			l.failed(err)
			continue
		}
		l.s.Store(s)
		logger.Info("floodgate: connected to Redis")
		return
	}
}

var errNotConnected = errors.New("redis: not connected yet")

// Apply applies b to Redis once connected, and fails until then.
func (l *lateStore) Apply(ctx context.Context, b *store.Batch) error {
	if s := l.s.Load(); s != nil {
		return s.Apply(ctx, b)
	}
	return errNotConnected
}

// Ping pings Redis once connected; until then it returns the last dial's
// error (so /readyz and floodgate_store_reachable report it).
func (l *lateStore) Ping(ctx context.Context) error {
	if s := l.s.Load(); s != nil {
		return s.Ping(ctx)
	}
	return *l.lastErr.Load()
}

// Close stops dialling and closes the store if it connected.
func (l *lateStore) Close() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
	if s := l.s.Load(); s != nil {
		s.Close()
	}
}
