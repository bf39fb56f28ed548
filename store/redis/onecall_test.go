package redis

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
)

// The tests in this file put several decisions on one key into one script
// call, on the server's clock, as the coalescer does under load: each must
// leave the key with the TTL its state needs, exactly as if each decision
// had had a call of its own.

// sendTogether runs bs as one coalesced script call on the server's clock
// and returns each batch's reply.
func sendTogether(t *testing.T, s *Store, bs ...*store.Batch) [][]int64 {
	t.Helper()
	return sendNamedAt(t, s, time.Now().UnixMicro(), bs...)
}

// sendNamedAt is sendTogether with aligned windows named at ref (µs).
func sendNamedAt(t *testing.T, s *Store, ref int64, bs ...*store.Batch) [][]int64 {
	t.Helper()
	ps := make([]*pending, len(bs))
	for i, b := range bs {
		c := &call{}
		s.build(c, b, opIndexes(b), int(b.Mode), -1, ref, nil)
		ps[i] = &pending{c: c, done: make(chan struct{})}
	}
	s.run.(*coalescer).send(ps)
	out := make([][]int64, len(bs))
	for i, p := range ps {
		if p.err != nil {
			t.Fatalf("batch %d: %v", i, p.err)
		}
		c := p.c
		c.reply = p.reply
		if c.shape.aligned && !missed(c) {
			c.reply = expandAligned(c, bs[i], opIndexes(bs[i]))
		}
		out[i] = c.reply
	}
	return out
}

func serverClockStore(t *testing.T, srv *redistest.Server) *Store {
	t.Helper()
	s, err := New(&Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pttl reads a key's PTTL in ms (-2: no key, -1: no TTL).
func pttl(t *testing.T, srv *redistest.Server, key string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(srv.MustDo("PTTL", key), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestOneCallFixedWindowKeepsTTL: two consumes of one fixed window in one
// call, on a fresh key and on a key whose previous window has just passed,
// leave the key expiring with the window the call opened, for first-hit
// and clock-aligned windows. The second decision used to queue KEEPTTL
// over the first's TTL: a fresh key never expired, and a key from the
// previous window kept that window's TTL and lost the new count at once.
func TestOneCallFixedWindowKeepsTTL(t *testing.T) {
	srv := redistest.Start(t)
	s := serverClockStore(t, srv)
	for _, align := range []store.Align{store.AlignFirstHit, store.AlignClock} {
		t.Run(align.String(), func(t *testing.T) {
			const window = time.Second
			op := store.Op{Scope: "onecall/fixed-" + align.String(), Key: "user:1",
				Params: store.Params{Algorithm: store.FixedWindow, Limit: 100, Window: window, Align: align}}
			key := s.keyOf(op.Scope, op.Key, suffix[store.FixedWindow])
			consume := func() *store.Batch {
				return &store.Batch{Mode: store.Consume, Cost: 1, Ticket: 1, Ops: []store.Op{op}}
			}
			// r is a call's replies: an aligned window's counter is the key
			// naming the window's start (the stamp, µs) in ms.
			check := func(when string, r [][]int64) {
				t.Helper()
				key := key
				if align != store.AlignFirstHit {
					key += ":" + strconv.FormatInt(r[0][2+replyStamp]/1000, 10)
				}
				if got := pttl(t, srv, key); got <= 0 || got > window.Milliseconds() {
					t.Fatalf("%s: PTTL %d ms, want within (0, %d]", when, got, window.Milliseconds())
				}
			}
			check("fresh key", sendTogether(t, s, consume(), consume()))
			// Wait for the stored window to pass on the server's clock;
			// the key may still be there (its TTL is rounded up to the
			// ms): the next call opens the next window. (PTTL reaching 0
			// does not say the window has passed: the window can have
			// most of a millisecond left.)
			for {
				r := sendTogether(t, s, &store.Batch{Mode: store.Peek, Ops: []store.Op{op}})
				if len(r[0]) == 2 {
					// A miss (-1, now): the server's clock is already in
					// another window than the key the peek named; ask again.
					time.Sleep(time.Millisecond)
					continue
				}
				if r[0][2+replyReset] == 0 || r[0][2+replyRemaining] == op.Params.Limit {
					break
				}
				time.Sleep(time.Millisecond)
			}
			r := sendTogether(t, s, consume(), consume(), consume())
			check("window turned", r)
			if got := r[2][2+replyRemaining]; got != 97 {
				t.Fatalf("third consume of the new window: remaining %d, want 97", got)
			}
			time.Sleep(20 * time.Millisecond)
			r = sendTogether(t, s, &store.Batch{Mode: store.Peek, Ops: []store.Op{op}})
			if got := r[0][2+replyRemaining]; got != 97 {
				t.Fatalf("20 ms later: remaining %d, want 97 (the window's count was lost)", got)
			}
		})
	}
}

// TestOneCallRefundKeepsTTL: a refund coalesced after a consume of the
// same token bucket or GCRA key keeps the TTL the consume queued. It used
// to queue KEEPTTL over it: the key kept an earlier call's shorter TTL (or
// none, on a key that call had created) and vanished while still holding
// the consume's debt.
func TestOneCallRefundKeepsTTL(t *testing.T) {
	srv := redistest.Start(t)
	s := serverClockStore(t, srv)
	for _, alg := range []store.Algorithm{store.TokenBucket, store.GCRA} {
		for _, fresh := range []bool{false, true} {
			name := alg.String() + "/earlier-key"
			if fresh {
				name = alg.String() + "/fresh-key"
			}
			t.Run(name, func(t *testing.T) {
				op := store.Op{Scope: "onecall/" + name, Key: "user:1",
					Params: store.Params{Algorithm: alg, Limit: 100, Window: time.Second, Burst: 100}}
				key := s.keyOf(op.Scope, op.Key, suffix[alg])
				first := &store.Batch{Mode: store.Consume, Cost: 30, Ticket: 7, Ops: []store.Op{op}}
				r := sendTogether(t, s, first)
				stamped := op
				stamped.Stamp = r[0][2+replyStamp]
				if fresh {
					srv.MustDo("DEL", key)
				}
				r = sendTogether(t, s,
					&store.Batch{Mode: store.Consume, Cost: 70, Ticket: 8, Ops: []store.Op{op}},
					&store.Batch{Mode: store.Refund, Cost: 30, Ticket: 7, Ops: []store.Op{stamped}})
				// What the key holds after both needs reset ms to be full.
				need := r[1][2+replyReset] / 1000
				if got := pttl(t, srv, key); got < need || got > 1000 {
					t.Fatalf("PTTL %d ms; the state needs %d ms to be full (at most 1000)", got, need)
				}
			})
		}
	}
}

// TestFixedWindowReplacesTextState: a first-hit window's key left by an
// earlier build (text, "n=... start=... end=...") counts as absent, and the
// next charge replaces it with the hash, expiring with the new window;
// HMGET on it used to fail the decision (WRONGTYPE) until it expired.
func TestFixedWindowReplacesTextState(t *testing.T) {
	srv := redistest.Start(t)
	s := serverClockStore(t, srv)
	op := store.Op{Scope: "upgrade/r@1m", Key: "user:1",
		Params: store.Params{Algorithm: store.FixedWindow, Limit: 10, Window: time.Minute}}
	key := s.keyOf(op.Scope, op.Key, suffix[store.FixedWindow])
	srv.MustDo("SET", key, "n=9 start=1 end=2", "PX", "60000")
	peek := sendTogether(t, s, &store.Batch{Mode: store.Peek, Cost: 1, Ops: []store.Op{op}})
	if got := peek[0][2+replyRemaining]; got != 10 {
		t.Fatalf("peek on the old state: remaining %d, want 10", got)
	}
	r := sendTogether(t, s, &store.Batch{Mode: store.Consume, Cost: 3, Ticket: 1, Ops: []store.Op{op}})
	if r[0][0] != 1 || r[0][2+replyRemaining] != 7 {
		t.Fatalf("consume of 3: %v, want admitted with 7 remaining", r[0])
	}
	if got := srv.MustDo("HGET", key, "n"); got != "3" {
		t.Fatalf("HGET n: %q, want 3", got)
	}
	if got := pttl(t, srv, key); got <= 0 || got > 60000 {
		t.Fatalf("PTTL %d ms, want within (0, 60000]", got)
	}
}

// TestAlignedWindowNamedForAnotherWindowMisses: a call whose aligned
// window's key was named at a reading in another window than the server's
// (clocks that straddle a boundary, a call sent again after a wait) changes
// nothing and answers the server's time, at which the store names it
// again.
func TestAlignedWindowNamedForAnotherWindowMisses(t *testing.T) {
	srv := redistest.Start(t)
	s := serverClockStore(t, srv)
	op := store.Op{Scope: "miss/r@1m", Key: "user:1",
		Params: store.Params{Algorithm: store.FixedWindow, Limit: 10, Window: time.Minute, Align: store.AlignClock}}
	b := &store.Batch{Mode: store.Consume, Cost: 1, Ticket: 1, Ops: []store.Op{op}}
	send := func(ref int64) []int64 { return sendNamedAt(t, s, ref, b)[0] }
	r := send(time.Now().Add(-time.Hour).UnixMicro())
	if len(r) != 2 || r[0] != -1 {
		t.Fatalf("named an hour ago: reply %v, want a miss {-1, now}", r)
	}
	if keys := srv.MustDo("DBSIZE"); keys != "0" {
		t.Fatalf("a miss left %s keys, want none", keys)
	}
	r = send(r[1])
	if len(r) != 2+replyPerOp || r[0] != 1 || r[2+replyRemaining] != 9 {
		t.Fatalf("named at the server's reading: reply %v, want admitted with 9 remaining", r)
	}
}
