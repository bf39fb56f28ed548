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
