package topkeys_test

// BenchmarkOverhead measures what a Tracker adds to a one-rule memory
// decision: a token bucket per user, called as lim.AllowKey(ctx, "user:N"),
// 10k existing keys drawn uniformly, every decision admitted. It runs
// without an observer; with an observer that does nothing, told of every
// decision (the cost of an Event); with a Tracker as the limiter's
// Observer, sampling admitted decisions 1 in 8 for it
// (Options.ObserveSample, as the package documentation advises); and
// with one told of every decision.
// A round runs them one after the other; run rounds by running the test
// binary repeatedly (go test -count repeats each sub-benchmark in a row):
//
//	go test -c -o /tmp/topkeys.test ./topkeys
//	for i in $(seq 10); do /tmp/topkeys.test -test.run '^$' -test.bench Overhead -test.benchmem -test.benchtime 200ms; done

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/topkeys"
)

func BenchmarkOverhead(b *testing.B) {
	overhead(b, floodgate.Rule{Name: "per-user", Algorithm: floodgate.TokenBucket,
		Limit: 1_000_000_000, Window: time.Second, Key: []string{"user"}}, true)
}

// BenchmarkOverheadDenied is BenchmarkOverhead with every decision denied
// (a fixed window of 1 per hour, already used): the path of an attack,
// where a Tracker counts every decision as a denial, sampled or not.
func BenchmarkOverheadDenied(b *testing.B) {
	overhead(b, floodgate.Rule{Name: "per-user", Algorithm: floodgate.FixedWindow,
		Limit: 1, Window: time.Hour, Key: []string{"user"}}, false)
}

func overhead(b *testing.B, rule floodgate.Rule, admit bool) {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name string
		opts func() *floodgate.Options
	}{
		{"observer=none", func() *floodgate.Options { return nil }},
		{"observer=noop", func() *floodgate.Options {
			return &floodgate.Options{Observer: func(context.Context, floodgate.Event) {}}
		}},
		{"observer=topkeys", func() *floodgate.Options {
			return &floodgate.Options{Observer: topkeys.New(nil).Observe, ObserveSample: 8}
		}},
		{"observer=topkeys-unsampled", func() *floodgate.Options {
			return &floodgate.Options{Observer: topkeys.New(nil).Observe}
		}},
	} {
		for _, parallel := range []bool{false, true} {
			name := bc.name + "/serial"
			if parallel {
				name = bc.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				st := memory.New(&memory.Options{MaxKeys: 4 * len(keys), SweepInterval: -1})
				defer st.Close()
				l, err := floodgate.New("bench", st, []floodgate.Rule{rule}, bc.opts())
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				for _, k := range keys {
					l.AllowKey(ctx, k)
				}
				b.ReportAllocs()
				b.ResetTimer()
				defer benchtool.ReportCPU(b, benchtool.CPU())
				if !parallel {
					r := benchtool.NewRand()
					for b.Loop() {
						if d := l.AllowKey(ctx, keys[r.Intn(len(keys))]); d.Allowed != admit {
							b.Fatalf("allowed %v, want %v", d.Allowed, admit)
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					r := benchtool.NewRand()
					for pb.Next() {
						if d := l.AllowKey(ctx, keys[r.Intn(len(keys))]); d.Allowed != admit {
							b.Errorf("allowed %v, want %v", d.Allowed, admit)
							return
						}
					}
				})
			})
		}
	}
}
