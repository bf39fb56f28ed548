package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
)

// TestCoalescedMatchesAlone runs the same random batches (every algorithm
// and mode, reservations and their settlements included, few keys, so
// batches of one call share keys) through two
// stores on one server: one sends each batch in its own script call, the
// other sends them in groups of up to 40 per coalesced call. Every
// batch's reply must be the same.
func TestCoalescedMatchesAlone(t *testing.T) {
	srv := redistest.Start(t)
	open := func(prefix string) *Store {
		s, err := New(&Options{URL: "redis://" + srv.Addr, UseBatchTime: true, KeyPrefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	alone, together := open("a:"), open("b:")
	co := together.run.(*coalescer)
	shapes := []store.Params{
		{Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Second},
		{Algorithm: floodgate.FixedWindow, Limit: 7, Window: 1500 * time.Millisecond, Align: floodgate.AlignClock},
		{Algorithm: floodgate.FixedWindow, Limit: 30, Align: floodgate.AlignMonth},
		{Algorithm: floodgate.SlidingWindow, Limit: 6, Window: time.Second, Buckets: 10},
		{Algorithm: floodgate.TokenBucket, Limit: 3, Window: time.Second, Burst: 5},
		{Algorithm: floodgate.GCRA, Limit: 3, Window: time.Second, Burst: 4},
		{Algorithm: floodgate.Concurrency, Limit: 4, Window: 2 * time.Second},
		{Algorithm: floodgate.FixedWindow, Limit: 9, Window: time.Second, Holds: true},
		{Algorithm: floodgate.FixedWindow, Limit: 8, Window: 2 * time.Second, Align: floodgate.AlignClock, Holds: true},
	}
	type done struct {
		b     *store.Batch
		reply []int64
	}
	var admitted, reserved []done
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	batches := 0
	for round := range 60 {
		now = now.Add(time.Duration(rng.IntN(700_000)) * time.Microsecond)
		var group []*store.Batch
		for range 1 + rng.IntN(40) {
			b := &store.Batch{Now: now, Ticket: rng.Uint64() | 1, Cost: 1 + int64(rng.IntN(2))}
			switch r := rng.IntN(20); {
			case r < 12:
				b.Mode = floodgate.ModeConsume
			case r < 15:
				b.Mode = floodgate.ModePeek
			case r < 17:
				b.Mode = floodgate.ModeRecord
			case r < 19:
				b.Mode = store.Refund
			default:
				b.Mode = store.Reset
			}
			switch {
			case b.Mode == floodgate.ModeConsume && rng.IntN(3) == 0:
				b.Hold = store.Hold{Units: 1 + int64(rng.IntN(4)), Until: now.Add(time.Duration(rng.IntN(1500)) * time.Millisecond).UnixMicro()}
			case b.Mode == store.Refund && rng.IntN(2) == 0:
				b.Mode = store.Settle
			}
			if b.Mode == store.Settle {
				b.Cost = int64(rng.IntN(4))
				if len(reserved) == 0 || rng.IntN(3) == 0 { // the oldest hold
					b.Ticket = 0
					si := len(shapes) - 1 - rng.IntN(2)
					b.Ops = append(b.Ops, store.Op{Scope: fmt.Sprintf("r%d", si), Key: fmt.Sprintf("k%d", rng.IntN(2)), Params: shapes[si]})
				} else {
					d := reserved[rng.IntN(len(reserved))]
					b.Ticket = d.b.Ticket
					for i, op := range d.b.Ops {
						if op.Held {
							op.Stamp, op.Held = d.reply[2+i*replyPerOp+replyStamp], false
							b.Ops = append(b.Ops, op)
						}
					}
					if len(b.Ops) == 0 {
						continue
					}
				}
			} else if b.Mode == store.Refund {
				if len(admitted) == 0 {
					continue
				}
				d := admitted[rng.IntN(len(admitted))]
				b.Ticket, b.Cost = d.b.Ticket, d.b.Cost
				for i, op := range d.b.Ops {
					op.Stamp = d.reply[2+i*replyPerOp+replyStamp]
					b.Ops = append(b.Ops, op)
				}
			} else {
				used := map[string]bool{}
				for range 1 + rng.IntN(3) {
					si := rng.IntN(len(shapes))
					op := store.Op{Scope: fmt.Sprintf("r%d", si), Key: fmt.Sprintf("k%d", rng.IntN(2)), Params: shapes[si], Shadow: rng.IntN(8) == 0}
					op.Held = b.Hold.Units > 0 && op.Params.Holds
					if !used[op.Scope+op.Key] {
						used[op.Scope+op.Key] = true
						b.Ops = append(b.Ops, op)
					}
				}
			}
			group = append(group, b)
		}
		// Alone: one call each, in order.
		want := make([][]int64, len(group))
		for i, b := range group {
			var c call
			alone.build(&c, b, opIndexes(b), int(b.Mode), b.Now.UnixMicro(), b.Now.UnixMicro(), nil)
			co := alone.run.(*coalescer)
			co.rueidisRunner.run(ctx, []*call{&c})
			if c.err != nil {
				t.Fatal(c.err)
			}
			want[i] = c.reply
		}
		// Together: one coalesced call.
		ps := make([]*pending, len(group))
		for i, b := range group {
			c := &call{}
			together.build(c, b, opIndexes(b), int(b.Mode), b.Now.UnixMicro(), b.Now.UnixMicro(), nil)
			ps[i] = &pending{c: c, done: make(chan struct{})}
		}
		co.send(ps)
		for i, p := range ps {
			if p.err != nil {
				t.Fatalf("round %d batch %d: %v", round, i, p.err)
			}
			if !reflect.DeepEqual(p.reply, want[i]) {
				t.Fatalf("round %d batch %d of %d (mode %v, ops %+v):\ncoalesced %v\nalone     %v", round, i, len(group), group[i].Mode, group[i].Ops, p.reply, want[i])
			}
			r := want[i]
			if p.c.shape.aligned && !missed(&call{reply: r}) {
				r = expandAligned(&call{reply: r, spans: p.c.spans}, group[i], opIndexes(group[i]))
			}
			switch {
			case group[i].Mode == floodgate.ModeConsume && r[0] == 1 && group[i].Hold.Units > 0:
				reserved = append(reserved, done{group[i], r})
			case group[i].Mode == floodgate.ModeConsume && r[0] == 1:
				admitted = append(admitted, done{group[i], r})
			}
		}
		batches += len(group)
	}
	t.Logf("%d batches compared, %d admitted consumes, %d reservations", batches, len(admitted), len(reserved))
}

// TestCoalescedLargeCall sends one call of 64 batches of 30 rules each
// (1,920 keys, more than the script's MGET reads in one chunk): every
// batch is answered, and answered as alone.
func TestCoalescedLargeCall(t *testing.T) {
	srv := redistest.Start(t)
	s, err := New(&Options{URL: "redis://" + srv.Addr, UseBatchTime: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ps := make([]*pending, 64)
	for i := range ps {
		b := &store.Batch{Mode: store.Consume, Now: now, Cost: 1, Ticket: uint64(i + 1)}
		for r := range 30 {
			b.Ops = append(b.Ops, store.Op{Scope: fmt.Sprintf("big/r%d", r), Key: fmt.Sprint("k", i%3),
				Params: store.Params{Algorithm: store.FixedWindow, Limit: 40, Window: time.Minute}})
		}
		c := &call{}
		s.build(c, b, opIndexes(b), int(b.Mode), now.UnixMicro(), now.UnixMicro(), nil)
		ps[i] = &pending{c: c, done: make(chan struct{})}
	}
	s.run.(*coalescer).send(ps)
	for i, p := range ps {
		if p.err != nil {
			t.Fatalf("batch %d: %v", i, p.err)
		}
		// Keys k0, k1, k2 take turns: batch i is its key's (i/3+1)th hit.
		allowed, remaining := p.reply[0], p.reply[2+replyRemaining]
		if want := int64(40 - (i/3 + 1)); allowed != 1 || remaining != max(want, 0) {
			t.Fatalf("batch %d: allowed %d, remaining %d, want 1 and %d", i, allowed, remaining, want)
		}
	}
}

func opIndexes(b *store.Batch) []int {
	idx := make([]int, len(b.Ops))
	for i := range idx {
		idx[i] = i
	}
	return idx
}
