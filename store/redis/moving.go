package redis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/internal/algo"
	"github.com/floodgate-go/floodgate/store"
)

// A Cluster slot being migrated from one master to another (redis-cli
// --cluster reshard or rebalance, or CLUSTER SETSLOT by hand) and a node
// still loading its data set after a restart refuse some calls before they
// run anything:
//
//   - TRYAGAIN: a call of several keys on a migrating slot whose keys are
//     not all on one of the two nodes. A key the call would create (a new
//     user's window, a refund's spent-ticket record) is on neither, so such
//     a call is refused for as long as the slot migrates, seconds or more;
//     keys that exist are refused only while a migration has moved some of
//     them and not the others (between two MIGRATE commands).
//   - LOADING: the node is loading its data set.
//   - ASK and MOVED: redirects, which rueidis follows itself until the
//     deadline; one reaches the store only if it gave up.
//
// Redis decides these in processCommand, before a script's first
// command, so the script did not run and nothing was charged: a refused
// call can be sent again, however often, without charging twice. (A
// script that fails once it runs answers an ERR reply, never one of
// these.) Such a refusal says the node is up, so it is never counted
// against the node's breaker.
//
// The store sends a refused call again after a short wait, doubling from
// movingFirstWait to movingMaxWait, while the call's deadline leaves time
// (see Store.exec). A refused call of several keys is first taken apart
// (see apart), so that each part's keys are one op's and it is refused
// only while a migration has moved some of that op's keys and not the
// others.

// The waits before a refused call is sent again.
const (
	movingFirstWait = time.Millisecond
	movingMaxWait   = 16 * time.Millisecond
)

// movingNoDeadline bounds the waits of a call whose context has no
// deadline.
const movingNoDeadline = time.Second

// moving reports whether err is a reply by which Redis refused a call
// before running it, because its slot is migrating or its node is loading.
func moving(err error) bool {
	var se *serverError
	if !errors.As(err, &se) {
		return false
	}
	for _, p := range [...]string{"TRYAGAIN", "LOADING", "ASK ", "MOVED "} {
		if strings.HasPrefix(se.msg, p) {
			return true
		}
	}
	return false
}

// refusedTryAgain reports whether err is a TRYAGAIN reply.
func refusedTryAgain(err error) bool {
	var se *serverError
	return errors.As(err, &se) && strings.HasPrefix(se.msg, "TRYAGAIN")
}

// prime makes a call of one op of two keys (a concurrency rule's, or a
// fixed window's with its holds) on a migrating slot possible when one of
// them does not exist: Redis refuses (TRYAGAIN) a call of several keys
// that are not all on one node for as long as the slot migrates. Each
// missing key is created alone, by the library's prime function with one
// key, which Redis sends to the node that holds the key or, on neither,
// to the slot's target, where the op's call then finds both. Every key
// primed means what no key means, so priming changes no decision. It is
// done each time the call is refused, as another call may have deleted a
// key meanwhile (the last lease released, the last hold settled).
func (s *Store) prime(ctx context.Context, b *store.Batch, g *group, now int64) {
	op := &b.Ops[g.idx[0]]
	p := &op.Params
	life := p.Window.Microseconds()
	var keys [2][2]string // each key and what it is made as
	switch {
	case p.Algorithm == store.Concurrency:
		key := s.keyOf(op.Scope, op.Key, suffix[store.Concurrency])
		keys = [2][2]string{{key, "state"}, {key + leaseSet, "leases"}}
	case holding(p) && aligned(p):
		start, end := algo.WindowAt(p, g.ref)
		life = end - g.ref
		keys = [2][2]string{{s.windowKey(op.Scope, op.Key, start), "counter"}, {s.keyOf(op.Scope, op.Key, holdSet), "leases"}}
	case holding(p):
		keys = [2][2]string{{s.keyOf(op.Scope, op.Key, suffix[store.FixedWindow]), "state"}, {s.keyOf(op.Scope, op.Key, holdSet), "leases"}}
	default:
		return
	}
	t, w := strconv.FormatInt(now, 10), strconv.FormatInt(max(life, 1000), 10)
	for _, k := range keys {
		if s.alone(ctx, func() error {
			return serverErr(s.c.Do(ctx, s.c.B().Fcall().Function(function+"_prime").Numkeys(1).Key(k[0]).Arg(k[1], t, w).Build()).Error())
		}) != nil {
			return // the op's call answers for it
		}
	}
}

// alone runs send, a call of one key that apart makes, again once the
// library is loaded if its node (a new one, say) does not hold it: the
// call it serves is refused before Redis looks for the function.
func (s *Store) alone(ctx context.Context, send func() error) error {
	loaded := s.r.loads.Load()
	err := send()
	if isNoFunction(err) && s.r.load(ctx, loaded) == nil {
		err = send()
	}
	return err
}

// apart returns what to send again in place of g, a group Redis refused
// without running (see moving): g itself or, refused with TRYAGAIN and of
// several ops, one group per op in g's slot, as if its ops lived in
// different slots: a consume is then checked and charged per op and
// compensated when one denies (see Store.Apply), a refund gives back per
// op. A refund's group first records its ticket spent (see markSpent) and
// its parts run as compensations, which keep no record; a ticket found
// spent is given back no more, and its group is answered so. A
// concurrency op's two keys stay together: they are written together, so
// they are refused only while a migration has moved one and not yet the
// other; a group of one such op is primed (see prime).
func (s *Store) apart(ctx context.Context, b *store.Batch, g *group, mode int, now int64) []*group {
	if !refusedTryAgain(g.c.err) {
		return []*group{g}
	}
	once := mode == int(store.Refund) || (mode == int(store.Settle) && b.Ticket != 0)
	if len(g.idx) == 1 && (g.part || !once) {
		s.prime(ctx, b, g, now)
		return []*group{g}
	}
	if once {
		fresh, err := s.markSpent(ctx, b, g, now, g.ref)
		switch {
		case err != nil:
			return []*group{g} // refused again, it is taken apart after the next wait
		case !fresh:
			// Spent already: nothing to give back, and the reply the
			// script gives a spent ticket.
			g.c.err, g.c.reply = nil, make([]int64, 2+replyPerOp*len(g.idx))
			return nil
		}
	}
	parts := make([]*group, len(g.idx))
	for j, i := range g.idx {
		parts[j] = &group{idx: []int{i}, slot: g.slot, node: g.node, ref: g.ref, part: true, waited: true}
	}
	return parts
}

// markSpent records the ticket of a refund's group spent, by a refund of
// no ops (a call of one key: the record), and reports whether it was not
// yet.
func (s *Store) markSpent(ctx context.Context, b *store.Batch, g *group, now, ref int64) (bool, error) {
	var c call
	s.build(&c, b, g.idx, modeSpend, now, ref, nil)
	err := s.alone(ctx, func() error {
		s.r.run(ctx, []*call{&c})
		return c.err
	})
	return err == nil && c.reply[0] == 1, err
}
