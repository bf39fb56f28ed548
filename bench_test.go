package floodgate_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

// BenchmarkOneRule asks a limiter of one token-bucket rule for 10,000
// existing keys with AllowKey, as the README does, on its one specialised
// function (decideOne: the store asked in registers, no sheet) and on the
// general path every other decision takes. The difference is what
// decideOne is kept for.
//
//	go test -run '^$' -bench OneRule -benchmem -count 8 .
func BenchmarkOneRule(b *testing.B) {
	for _, path := range []string{"one", "general"} {
		b.Run(path, func(b *testing.B) {
			st := memory.New(&memory.Options{SweepInterval: -1})
			defer st.Close()
			l, err := floodgate.New("bench", st, []floodgate.Rule{
				{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 1_000_000_000, Window: time.Second, Key: []string{"user"}},
			}, nil)
			if err != nil {
				b.Fatal(err)
			}
			if path == "general" {
				floodgate.GeneralPath(l)
			}
			keys := make([]string, 10_000)
			ctx := context.Background()
			for i := range keys {
				keys[i] = "user:" + strconv.Itoa(i)
				l.AllowKey(ctx, keys[i])
			}
			i := 0
			for b.Loop() {
				if !l.AllowKey(ctx, keys[i%len(keys)]).Allowed {
					b.Fatal("denied")
				}
				i++
			}
		})
	}
}

// BenchmarkBudget asks a per-tenant token budget (a reservable fixed
// window, 1,000 tenants) for an LLM answer of up to 8,000 tokens that used
// 3,000, the two ways docs/gateway.md teaches: reserve the most and settle
// with the use (exact), or peek and record the use after (cheap,
// overshooting under concurrency). An op is one answer, both calls.
//
//	go test -run '^$' -bench Budget -benchmem -count 8 .
func BenchmarkBudget(b *testing.B) {
	for _, way := range []string{"reserve-settle", "peek-record"} {
		b.Run(way, func(b *testing.B) {
			st := memory.New(&memory.Options{SweepInterval: -1})
			defer st.Close()
			l, err := floodgate.New("gateway", st, []floodgate.Rule{{
				Name: "tokens-per-day", Algorithm: floodgate.FixedWindow, Limit: 1 << 50,
				Align: floodgate.AlignDay, Key: []string{"tenant"}, Reservable: true,
			}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			tenants := make([]floodgate.Attributes, 1000)
			for i := range tenants {
				tenants[i] = floodgate.Attributes{"tenant": "tenant:" + strconv.Itoa(i)}
			}
			i := 0
			for b.Loop() {
				attrs := tenants[i%len(tenants)]
				i++
				if way == "peek-record" {
					if d, err := l.Peek(ctx, attrs, 8000); err != nil || !d.Allowed {
						b.Fatal(d, err)
					}
					if _, err := l.Record(ctx, attrs, 3000); err != nil {
						b.Fatal(err)
					}
					continue
				}
				o, err := l.Reserve(ctx, attrs, 8000, time.Minute)
				if err != nil || !o.Allowed {
					b.Fatal(o, err)
				}
				if s, err := l.Settle(ctx, o.Ticket(), 3000); err != nil || s != floodgate.Settled {
					b.Fatal(s, err)
				}
			}
		})
	}
}
