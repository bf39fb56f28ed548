package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/floodgate-go/floodgate/store"
	"github.com/redis/rueidis"
)

// group is the ops of a batch that share a slot, with their script call.
type group struct {
	idx     []int
	c       call
	slot    uint16
	node    *node // the slot's master, in Cluster once known
	ref     int64 // µs: the time its aligned windows are named at
	again   int   // times sent again at once
	refused bool  // by the master's open breaker: the call did not go out
	part    bool  // one op of a group taken apart on a migrating slot (see apart)
	waited  bool  // refused for a migrating slot or a loading node, sent again after a wait
}

// mode is the script mode g's call runs in: a refund's part is a
// compensation and a settle's a settlepart, their ticket recorded spent
// already (see apart).
func (g *group) mode(m int) int {
	switch {
	case g.part && m == int(store.Refund):
		return modeCompensate
	case g.part && m == int(store.Settle):
		return modeSettlePart
	}
	return m
}

// again reports whether a call of b in mode m whose connection broke may
// be sent again: running it twice must not loosen a limit. A compensation
// would give back twice, a settle part or a settle without a ticket would
// end a second hold (a settle of a ticket, like a refund, is recorded
// spent, so that its second run changes nothing).
func again(b *store.Batch, m int) bool {
	return m != modeCompensate && m != modeSettlePart && !(m == int(store.Settle) && b.Ticket == 0)
}

// groups splits b's ops by Cluster slot, in order of first appearance;
// outside Cluster they are one group.
func (s *Store) groups(b *store.Batch) []*group {
	var gs []*group
	for i := range b.Ops {
		var sl uint16
		if s.nodes != nil {
			sl = slotOf(s.tag, b.Ops[i].Scope, b.Ops[i].Key)
		}
		j := 0
		for j < len(gs) && gs[j].slot != sl {
			j++
		}
		if j == len(gs) {
			gs = append(gs, &group{slot: sl, idx: make([]int, 0, len(b.Ops))})
		}
		gs[j].idx = append(gs[j].idx, i)
	}
	return gs
}

// maxAgain bounds how often a call is sent again at once (see exec): more
// than a few closed connections (rueidis keeps up to four per node).
const maxAgain = 8

// exec runs the groups' calls until each is answered or has failed for
// good, and returns the groups (those taken apart replaced by their
// parts) and the first error; groups that succeeded keep their replies.
// Each round sends the calls due together (pipelined, possibly to several
// nodes) and classifies each failure once:
//
//   - refused before it ran (see moving): sent again after a wait while
//     ctx's deadline leaves time, first taken apart (see apart);
//   - no such function (see isNoFunction): sent again once the library is
//     loaded;
//   - a miss (see missed): sent again at once, named at the script's time;
//   - a broken connection (see broken): sent again at once, unless a
//     compensation;
//   - anything else is final: an error reply from a script that ran, an
//     unreadable reply, the deadline, a dial that failed.
//
// A call is sent again at once at most maxAgain times. In Cluster, a group
// whose master's breaker is open is not sent, each group's outcome is its
// master's verdict, and every failure is a *store.ConfinedError (see
// nodes).
func (s *Store) exec(ctx context.Context, b *store.Batch, gs []*group, mode int, now, ref int64, stamps []int64) ([]*group, error) {
	for _, g := range gs {
		g.ref = ref
	}
	due, waiting := gs, []*group(nil)
	var local int64 // the breakers' clock (ns), read only in Cluster
	if s.nodes != nil {
		local = time.Now().UnixNano()
		if s.batchTime {
			local = b.Now.UnixNano()
		}
		s.nodes.due()
		due = nil
		for _, g := range gs {
			if g.refused = !s.nodes.allow(g, local); !g.refused {
				due = append(due, g)
			}
		}
	}
	end, ok := ctx.Deadline()
	if !ok {
		end = time.Now().Add(movingNoDeadline)
	}
	for wait := movingFirstWait; len(due) > 0 || len(waiting) > 0; {
		if len(due) == 0 {
			if time.Until(end) < wait {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			if ctx.Err() != nil {
				break
			}
			wait = min(2*wait, movingMaxWait)
			for _, g := range waiting {
				if now < 0 {
					g.ref = time.Now().UnixMicro() // aligned windows named after the wait
				}
				parts := s.apart(ctx, b, g, mode, now)
				if len(parts) > 0 && parts[0] != g { // taken apart
					i := slices.Index(gs, g)
					gs = slices.Replace(gs, i, i+1, parts...)
				}
				due = append(due, parts...)
			}
			waiting = nil
			continue
		}
		loaded := s.r.loads.Load()
		calls := make([]*call, len(due))
		for i, g := range due {
			s.build(&g.c, b, g.idx, g.mode(mode), now, g.ref, stamps)
			calls[i] = &g.c
		}
		s.run.run(ctx, calls)
		var reloads []*group
		sent := due
		due = nil
		for _, g := range sent {
			if moving(g.c.err) {
				g.waited = true
				waiting = append(waiting, g)
				continue
			}
			if g.again == maxAgain {
				continue
			}
			g.again++
			switch {
			case isNoFunction(g.c.err):
				reloads = append(reloads, g)
			case missed(&g.c):
				g.ref = g.c.reply[1] // named at the script's reading
				due = append(due, g)
			case broken(ctx, g.c.err) && again(b, g.mode(mode)):
				due = append(due, g)
			}
		}
		if len(reloads) > 0 {
			var se *serverError
			if err := s.r.load(ctx, loaded); errors.As(err, &se) && !moving(err) {
				for _, g := range reloads {
					g.c.err = err // the node refuses the library (an ACL, say)
				}
			} else {
				due = append(due, reloads...) // a load that failed is tried again with the call
			}
		}
	}
	var first error
	for _, g := range gs {
		if g.c.err == nil && g.c.shape.aligned && !missed(&g.c) {
			g.c.reply = expandAligned(&g.c, b, g.idx)
		}
		if g.c.err == nil && len(g.c.reply) != 2+replyPerOp*len(g.idx) {
			g.c.err = fmt.Errorf("redis: unexpected script reply of %d values", len(g.c.reply))
		}
		if s.nodes != nil && !g.refused {
			s.nodes.record(ctx, g, local)
		}
		if g.c.err != nil && first == nil {
			first = g.c.err
			if s.nodes != nil {
				first = confine(g, first)
			}
		}
	}
	return gs, first
}

// broken reports whether err says a call's connection broke: not an error
// reply, not an unreadable reply, not the deadline, not a dial that failed
// (no server there), not a client closed or without a node for the slot.
// A connection the server closed (a restart, a failover) is found dead
// only when next written to, so the first call on each fails. The call may
// have run before the connection broke; running it again charges twice,
// which is stricter, never looser, for every mode but those again excludes;
// a refund's spent-ticket record makes its second run a no-op.
func broken(ctx context.Context, err error) bool {
	var se *serverError
	var oe *net.OpError
	return err != nil && ctx.Err() == nil && !errors.As(err, &se) && !(errors.As(err, &oe) && oe.Op == "dial") &&
		!errors.Is(err, errReply) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, rueidis.ErrClosing) && !errors.Is(err, rueidis.ErrNoSlot)
}

// missed reports whether c's reply is a miss: an aligned window's key
// named for another window than the one holding the script's time (clocks
// that straddle a boundary, a call sent again after a wait).
func missed(c *call) bool {
	return c.err == nil && len(c.reply) == 2 && c.reply[0] == -1
}
