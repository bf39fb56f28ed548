package redis_test

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
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
)

// newStore returns a store on srv that uses the batch's time, with the
// over-limit cache off, so that its answers compare exactly with a
// reference's.
func newStore(t testing.TB, srv *redistest.Server) *redis.Store {
	t.Helper()
	return serverStore(t, []string{srv.Addr}, false, func(o *redis.Options) { o.UseBatchTime = true })
}

var ny, _ = time.LoadLocation("America/New_York")

// shapes are the rule parameter sets the differential test draws from.
var shapes = []store.Params{
	{Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Second},
	{Algorithm: floodgate.FixedWindow, Limit: 7, Window: 1500 * time.Millisecond, Align: floodgate.AlignClock},
	{Algorithm: floodgate.FixedWindow, Limit: 20, Align: floodgate.AlignDay, Location: ny},
	{Algorithm: floodgate.FixedWindow, Limit: 30, Align: floodgate.AlignMonth},
	{Algorithm: floodgate.SlidingWindow, Limit: 6, Window: time.Second, Buckets: 10},
	{Algorithm: floodgate.SlidingWindow, Limit: 9, Window: 3 * time.Second, Buckets: 60},
	{Algorithm: floodgate.TokenBucket, Limit: 3, Window: time.Second, Burst: 5},
	{Algorithm: floodgate.TokenBucket, Limit: 7, Window: 700 * time.Millisecond, Burst: 7},
	{Algorithm: floodgate.GCRA, Limit: 3, Window: time.Second, Burst: 4},
	{Algorithm: floodgate.GCRA, Limit: 1000, Window: time.Minute, Burst: 10},
	{Algorithm: floodgate.Concurrency, Limit: 4, Window: 2 * time.Second},
}

type issued struct {
	ticket uint64
	cost   int64
	ops    []store.Op
}

// TestMatchesMemory drives the memory store and the Redis store with the
// same random batches and the same clock and requires identical answers.
func TestMatchesMemory(t *testing.T) {
	srv := redistest.Start(t)
	rs := newStore(t, srv)
	ms := memory.New(&memory.Options{SweepInterval: -1})
	defer ms.Close()
	ctx := context.Background()
	var denied, admitted, refunds int
	defer func() { t.Logf("admitted %d, denied %d, refunds %d", admitted, denied, refunds) }()
	for seed := range uint64(12) {
		rng := rand.New(rand.NewPCG(seed, 42))
		now := time.Date(2026, 3, 8, 6, 59, 58, 0, time.UTC) // near a DST change in New York
		var tickets []issued
		for step := range 400 {
			switch r := rng.IntN(10); {
			case r < 4:
			case r < 8:
				now = now.Add(time.Duration(rng.IntN(400_000)) * time.Microsecond)
			default:
				now = now.Add(time.Duration(rng.IntN(30)) * time.Minute)
			}
			var b store.Batch
			b.Now = now
			switch r := rng.IntN(20); {
			case r < 11:
				b.Mode = floodgate.ModeConsume
			case r < 14:
				b.Mode = floodgate.ModePeek
			case r < 16:
				b.Mode = floodgate.ModeRecord
			case r < 19:
				b.Mode = store.Refund
			default:
				b.Mode = store.Reset
			}
			if b.Mode == store.Refund {
				if len(tickets) == 0 {
					continue
				}
				tk := tickets[rng.IntN(len(tickets))]
				b.Ticket, b.Cost = tk.ticket, tk.cost
				b.Ops = append([]store.Op(nil), tk.ops...)
			} else {
				b.Cost = 1 + int64(rng.IntN(3))
				if rng.IntN(8) == 0 {
					b.Cost = int64(rng.IntN(12))
				}
				if b.Mode != floodgate.ModeRecord && b.Cost == 0 {
					b.Cost = 1
				}
				b.Ticket = rng.Uint64() | 1
				for j, n := 0, 1+rng.IntN(3); j < n; j++ {
					si := rng.IntN(len(shapes))
					b.Ops = append(b.Ops, store.Op{
						Scope:  fmt.Sprintf("l%d/r%d", seed, si),
						Key:    fmt.Sprintf("k%d", rng.IntN(3)),
						Params: shapes[si],
						Shadow: rng.IntN(6) == 0,
					})
				}
				dedupe(&b)
			}
			mb := cloneBatch(&b)
			if err := ms.Apply(ctx, mb); err != nil {
				t.Fatal(err)
			}
			if err := rs.Apply(ctx, &b); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if b.Mode == floodgate.ModeConsume {
				if b.Allowed {
					admitted++
				} else {
					denied++
				}
			}
			if b.Mode == store.Refund {
				refunds++
				continue // refund results are not part of the contract
			}
			if b.Allowed != mb.Allowed || !reflect.DeepEqual(results(&b), results(mb)) {
				t.Fatalf("seed %d step %d mode %v cost %d at %v:\nredis  allowed=%v %+v\nmemory allowed=%v %+v",
					seed, step, b.Mode, b.Cost, now, b.Allowed, results(&b), mb.Allowed, results(mb))
			}
			if (b.Mode == floodgate.ModeConsume && b.Allowed) || b.Mode == floodgate.ModeRecord {
				var ops []store.Op
				for _, op := range b.Ops {
					if b.Mode == floodgate.ModeRecord || op.Result.Allowed {
						op.Result = store.Result{}
						ops = append(ops, op)
					}
				}
				if len(ops) > 0 {
					tickets = append(tickets, issued{b.Ticket, b.Cost, ops})
				}
			}
		}
	}
}

// dedupe keeps one op per scope, as a limiter's batches have.
func dedupe(b *store.Batch) {
	seen := map[string]bool{}
	out := b.Ops[:0]
	for _, op := range b.Ops {
		if !seen[op.Scope] {
			seen[op.Scope] = true
			out = append(out, op)
		}
	}
	b.Ops = out
}

func cloneBatch(b *store.Batch) *store.Batch {
	c := *b
	c.Ops = append([]store.Op(nil), b.Ops...)
	return &c
}

type opResult struct {
	Result store.Result
	Stamp  int64
}

func results(b *store.Batch) []opResult {
	out := make([]opResult, len(b.Ops))
	for i, op := range b.Ops {
		out[i] = opResult{op.Result, op.Stamp}
	}
	return out
}
