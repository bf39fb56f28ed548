package grant_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/overlimit"
	"github.com/floodgate-go/floodgate/store/redis"
)

// hangDeadline is the Redis deadline of the hang runs.
const hangDeadline = 200 * time.Millisecond

// hangRule is a hot key of 1,000 per second with grants, as floodgate
// serve would run it.
var hangRule = floodgate.Rule{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Second, Align: floodgate.AlignClock, Key: []string{"tenant"}, Grant: true}

// newServeInstance is one floodgate serve instance's chain for a limiter
// with granted rules: the grant store over a guard (the deadline, the
// default breaker) over the over-limit cache over a Redis store of its own,
// failing closed. The decisions the limiter hands the grant store are
// observed.
func newServeInstance(t *testing.T, srv *redistest.Server, rule floodgate.Rule, deadline time.Duration) *instance {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	in := &instance{redis: &counted{Store: rs}}
	g, err := guard.New(overlimit.New(in.redis, nil), &guard.Options{Timeout: deadline, Logger: quiet, Name: "redis"})
	if err != nil {
		t.Fatal(err)
	}
	in.grant = grant.New(g, nil)
	in.seen = &observed{grant: in.grant, windows: map[int64]int64{}}
	in.lim, err = floodgate.New("hang", in.seen, []floodgate.Rule{rule}, &floodgate.Options{FailurePolicy: floodgate.FailClosed, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestRedisHangWithinDeadline: four instances on one Redis, one hot key
// with grants, demand 10x the limit from 8 callers per instance, and Redis
// hung (SIGSTOP) for 1.5 s, or 300 ms: every decision returns within the
// deadline plus 100 ms (the decisions on the key wait for the one Redis
// call in flight for it, never for one after another), no window admits
// over the limit, and no key is left without a TTL.
func TestRedisHangWithinDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("a timed run of a few seconds")
	}
	for _, freeze := range []time.Duration{1500 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(freeze.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			ins := make([]*instance, 4)
			for i := range ins {
				ins[i] = newServeInstance(t, srv, hangRule, hangDeadline)
			}
			const callers = 8 // per instance
			every := time.Duration(float64(time.Second) / (10 * float64(hangRule.Limit)) * float64(callers*len(ins)))

			var (
				slowest   atomic.Int64 // ns
				late      atomic.Int64 // decisions over the bound
				byPolicy  atomic.Int64
				decisions atomic.Int64
			)
			bound := hangDeadline + 100*time.Millisecond
			// Redis hangs from just before a window turns: the window is
			// spent by then, and its denial answered without Redis (the
			// over-limit cache) until the turn, when every instance needs
			// a grant of the next window; the first grant calls time out
			// well before even the shorter hang ends.
			turn := time.Now().Truncate(time.Second).Add(2 * time.Second)
			time.Sleep(time.Until(turn.Add(-time.Second)))
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for _, in := range ins {
				for range callers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						ctx := context.Background()
						next := time.Now()
						for {
							select {
							case <-stop:
								return
							default:
							}
							start := time.Now()
							d := in.lim.AllowKey(ctx, "acme")
							took := time.Since(start)
							decisions.Add(1)
							if d.Reason == floodgate.ReasonStore {
								byPolicy.Add(1)
							}
							if took > bound {
								late.Add(1)
							}
							for s := slowest.Load(); int64(took) > s && !slowest.CompareAndSwap(s, int64(took)); s = slowest.Load() {
							}
							// Paced; a caller that fell behind skips what it missed.
							if next = next.Add(every); next.Before(time.Now()) {
								next = time.Now()
							}
							time.Sleep(time.Until(next))
						}
					}()
				}
			}
			time.Sleep(time.Until(turn.Add(-20 * time.Millisecond)))
			srv.Pause()
			time.Sleep(freeze)
			srv.Resume()
			time.Sleep(700 * time.Millisecond)
			close(stop)
			wg.Wait()

			windows := map[int64]int64{}
			var outside int64
			for _, in := range ins {
				in.lim.Close()
				in.grant.Close()
				for w, n := range in.seen.windows {
					windows[w] += n
				}
				outside += in.seen.outside
			}
			t.Logf("Redis hung %v: %d decisions, %d by policy; slowest %v, %d over %v",
				freeze, decisions.Load(), byPolicy.Load(), time.Duration(slowest.Load()).Round(time.Millisecond), late.Load(), bound)
			if byPolicy.Load() == 0 {
				t.Error("no decision was made by policy: the hang did not reach the decisions")
			}
			if n := late.Load(); n > 0 {
				t.Errorf("%d decisions took over the deadline plus 100 ms (%v); the slowest %v", n, bound, time.Duration(slowest.Load()))
			}
			for w, n := range windows {
				if n > hangRule.Limit {
					t.Errorf("window from %v: %d admitted, over the limit of %d", time.UnixMicro(w), n, hangRule.Limit)
				}
			}
			if outside > 0 {
				t.Errorf("%d admissions decided after the window they were charged to ended", outside)
			}
			if keys, err := srv.KeysWithoutTTL(); err != nil || len(keys) > 0 {
				t.Errorf("keys without a TTL: %v (%v)", keys, err)
			}
		})
	}
}
