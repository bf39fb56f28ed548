package redis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// connectRetry is how often a store whose Redis did not answer at start
// tries to connect again.
const connectRetry = time.Second

// connector is the runner of a store with a fallback whose Redis did not
// answer when the store was made. Until a connection succeeds every call
// fails at once with the last connection error, so the store answers from
// the fallback; a goroutine meanwhile dials again every connectRetry, and
// once it connects every later call goes to Redis.
type connector struct {
	co     rueidis.ClientOption
	wrap   func(*rueidisRunner) runner // what New does with a fresh client
	logger *slog.Logger

	ready atomic.Pointer[runnerRef] // nil until connected
	err   atomic.Pointer[error]     // the last connection error

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type runnerRef struct{ r runner }

func newConnector(co rueidis.ClientOption, first error, wrap func(*rueidisRunner) runner, logger *slog.Logger) *connector {
	c := &connector{co: co, wrap: wrap, logger: logger, stop: make(chan struct{}), done: make(chan struct{})}
	c.err.Store(&first)
	go c.dial()
	return c
}

func (c *connector) dial() {
	defer close(c.done)
	t := time.NewTicker(connectRetry)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		client, err := rueidis.NewClient(c.co)
		if err != nil {
			err = fmt.Errorf("redis: connect: %w", err)
			c.err.Store(&err)
			continue
		}
		select {
		case <-c.stop: // closed while dialling: drop the new client
			client.Close()
			return
		default:
		}
		c.ready.Store(&runnerRef{c.wrap(&rueidisRunner{c: client, owned: true})})
		c.logger.Info("floodgate/redis: connected to Redis after a failed start")
		return
	}
}

// connected returns the runner once the store has connected, or nil.
func (c *connector) connected() runner {
	if ref := c.ready.Load(); ref != nil {
		return ref.r
	}
	return nil
}

func (c *connector) run(ctx context.Context, calls []*call) {
	if r := c.connected(); r != nil {
		r.run(ctx, calls)
		return
	}
	err := *c.err.Load()
	for _, cl := range calls {
		cl.reply, cl.err = cl.reply[:0], err
	}
}

// cluster reports what the connected client found, and false before: no
// call reaches Redis until then, so how ops would be grouped by slot does
// not matter yet.
func (c *connector) cluster() bool {
	if r := c.connected(); r != nil {
		return r.cluster()
	}
	return false
}

// ping pings the connected client, or returns the last connection error.
func (c *connector) ping(ctx context.Context) error {
	if r := c.connected(); r != nil {
		return r.ping(ctx)
	}
	return *c.err.Load()
}

// slots reads the connected client's slot map.
func (c *connector) slots(ctx context.Context) ([]slotRange, error) {
	if r := c.connected(); r != nil {
		return r.slots(ctx)
	}
	return nil, *c.err.Load()
}

// config reads the connected client's nodes' configuration.
func (c *connector) config(ctx context.Context, name string) (map[string]string, error) {
	if r := c.connected(); r != nil {
		return r.config(ctx, name)
	}
	return nil, *c.err.Load()
}

func (c *connector) close() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
	if r := c.connected(); r != nil {
		r.close()
	}
}
