package redis

import (
	"context"
	"sync"
	"time"
)

// DefaultMaxCoalesce is how many decisions one script call carries at most
// when Options.MaxCoalesce is 0.
const DefaultMaxCoalesce = 64

// coalesceCalls is how many script calls a coalescer keeps in flight at
// once: while they are, decisions queue and go out together in the next.
const coalesceCalls = 2

// coalescer lets concurrent decisions on a single node share one script
// call. A decision that finds fewer than coalesceCalls calls in flight is
// sent at once, alone, on its caller's goroutine: no delay when idle. The
// others queue; when a call returns, the queue (up to max batches) goes out
// as the next call. The script applies each batch atomically and
// independently of the others, so coalescing changes nothing a decision
// sees but the number of commands. A caller whose context ends while its
// batch waits or is in a call returns at once with the context's error.
type coalescer struct {
	*rueidisRunner
	max int

	mu    sync.Mutex
	queue []*pending
	busy  int // calls in flight
}

// pending is one queued decision (one call). The sender writes reply and
// err, then closes done; the caller copies them into its call, so a
// caller that left early shares no memory the sender writes.
type pending struct {
	c        *call
	deadline time.Time // zero: none
	reply    []int64
	err      error
	done     chan struct{}
	taken    bool // guarded by mu: in a call
	gone     bool // guarded by mu: the caller left before it was taken
}

func (co *coalescer) run(ctx context.Context, calls []*call) {
	if len(calls) != 1 {
		co.rueidisRunner.run(ctx, calls)
		return
	}
	c := calls[0]
	co.mu.Lock()
	if co.busy < coalesceCalls && len(co.queue) == 0 {
		co.busy++
		co.mu.Unlock()
		co.rueidisRunner.run(ctx, calls)
		co.next()
		return
	}
	p := &pending{c: c, done: make(chan struct{})}
	p.deadline, _ = ctx.Deadline()
	co.queue = append(co.queue, p)
	co.mu.Unlock()
	select {
	case <-p.done:
		c.reply, c.err = p.reply, p.err
		return
	case <-ctx.Done():
	}
	co.mu.Lock()
	if !p.taken {
		p.gone = true
	}
	co.mu.Unlock()
	select {
	case <-p.done:
		c.reply, c.err = p.reply, p.err
	default:
		c.reply, c.err = nil, ctx.Err()
	}
}

// next is called by a decision sent alone when its call returned: it
// sends the queue, if any, on a goroutine that keeps sending until the
// queue is empty, or frees the call slot.
func (co *coalescer) next() {
	co.mu.Lock()
	batch := co.take(nil)
	if len(batch) == 0 {
		co.busy--
		co.mu.Unlock()
		return
	}
	co.mu.Unlock()
	go co.loop(batch)
}

// loop sends batch, then whatever queued meanwhile, until the queue is
// empty.
func (co *coalescer) loop(batch []*pending) {
	for {
		co.send(batch)
		clear(batch)
		co.mu.Lock()
		batch = co.take(batch[:0])
		if len(batch) == 0 {
			co.busy--
			co.mu.Unlock()
			return
		}
		co.mu.Unlock()
	}
}

// take moves up to max waiting decisions from the queue into batch. mu is
// held.
func (co *coalescer) take(batch []*pending) []*pending {
	n := 0
	for n < len(co.queue) && len(batch) < co.max {
		p := co.queue[n]
		n++
		if !p.gone {
			p.taken = true
			batch = append(batch, p)
		}
	}
	rest := copy(co.queue, co.queue[n:])
	clear(co.queue[rest:])
	co.queue = co.queue[:rest]
	return batch
}

// send runs batch as one script call, with the latest deadline of its
// decisions (none if one has none): each caller enforces its own.
func (co *coalescer) send(batch []*pending) {
	ctx := context.Background()
	var latest time.Time
	for _, p := range batch {
		if p.deadline.IsZero() {
			latest = time.Time{}
			break
		}
		if p.deadline.After(latest) {
			latest = p.deadline
		}
	}
	if !latest.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, latest)
		defer cancel()
	}
	c := batch[0].c
	shapes := make([]shape, len(batch))
	for i, p := range batch {
		shapes[i] = p.c.shape
	}
	if len(batch) > 1 {
		c = &call{}
		for _, p := range batch {
			c.keys = append(c.keys, p.c.keys...)
			c.args = append(c.args, p.c.args...)
		}
	}
	replies := make([][]int64, len(batch))
	errs := make([]error, len(batch))
	err := decode(co.eval(ctx, []*call{c})[0], shapes, replies, errs)
	for i, p := range batch {
		p.reply, p.err = replies[i], errs[i]
	}
	for _, p := range batch {
		if err != nil {
			p.err = err
		}
		close(p.done)
	}
}
