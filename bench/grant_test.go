package bench

// TestGrantSideBySide runs floodgate's quota grants and gubernator's GLOBAL
// behaviour on the same load, one after the other in one run: 4 instances
// (4 floodgate limiters, each with its own Redis client and grant store,
// on one redis-server; an in-process gubernator cluster of 4 peers on
// loopback, one client per peer), one hot key, 10,000 per second, total
// demand 10x, paced and spread evenly. It reports each one's admissions
// against its limit, and fails if floodgate's ever pass it.
//
// Run: make bench-grant (or cd bench && FLOODGATE_SIDE_BY_SIDE=10s go test -run '^TestGrantSideBySide$' -count=1 -v .)

import (
	"context"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/redis"
	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/gubernator-io/gubernator/v2/cluster"
	"github.com/sirupsen/logrus"
)

const (
	sideLimit     = 10_000 // per second
	sideDemand    = 10 * sideLimit
	sideInstances = 4
	sideBatch     = 100 // gubernator requests per GetRateLimits call
)

func TestGrantSideBySide(t *testing.T) {
	run := os.Getenv("FLOODGATE_SIDE_BY_SIDE")
	if run == "" {
		t.Skip("set FLOODGATE_SIDE_BY_SIDE to 1 or a duration (make bench-grant)")
	}
	d := 10 * time.Second
	if run != "1" {
		var err error
		if d, err = time.ParseDuration(run); err != nil || d < 2*time.Second {
			t.Fatalf("FLOODGATE_SIDE_BY_SIDE=%q: want 1 (10s) or a duration of 2s or more", run)
		}
	}
	fg := floodgateSide(t, d)
	gb := gubernatorSide(t, d)
	for _, r := range []sideResult{fg, gb} {
		t.Logf("%-10s %d windows: %d decisions, %d admitted of a limit of %d (%.2f%%); %d windows over the limit, the worst by %d",
			r.name, r.windows, r.decisions, r.admitted, sideLimit*r.windows, 100*float64(r.admitted)/float64(sideLimit*r.windows), r.over, r.worst)
	}
	if fg.over > 0 {
		t.Errorf("floodgate admitted over the limit in %d windows", fg.over)
	}
}

// sideResult is one contender's run: the admissions in the windows wholly
// inside it, and the windows over the limit.
type sideResult struct {
	name                string
	windows             int64
	decisions, admitted int64
	over, worst         int64
}

// tally sums per-window admissions (by window id) over the windows wholly in
// the run, ids first..first+n-1.
func tally(name string, perWindow map[int64]int64, first, n, decisions int64) sideResult {
	r := sideResult{name: name, windows: n, decisions: decisions}
	keys := make([]int64, 0, len(perWindow))
	for w := range perWindow {
		keys = append(keys, w)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, w := range keys {
		c := perWindow[w]
		if c > sideLimit {
			r.over++
			r.worst = max(r.worst, c-sideLimit)
		}
		if w >= first && w < first+n {
			r.admitted += c
		}
	}
	return r
}

// pace calls decide(n) from one goroutine per instance, n decisions at a
// time, so that the instances together ask sideDemand per second until d
// has passed from start.
func pace(start time.Time, d time.Duration, batch int, decide func(i, n int)) int64 {
	end := start.Add(d)
	var total atomic.Int64
	var wg sync.WaitGroup
	for i := range sideInstances {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rate := float64(sideDemand) / sideInstances
			var sent int64
			for now := time.Now(); now.Before(end); now = time.Now() {
				due := int64(now.Sub(start).Seconds() * rate)
				for sent < due && time.Now().Before(end) {
					decide(i, batch)
					sent += int64(batch)
				}
				time.Sleep(200 * time.Microsecond)
			}
			total.Add(sent)
		}()
	}
	wg.Wait()
	return total.Load()
}

// floodgateSide runs 4 limiters over grant stores over their own Redis
// stores, a fixed window of 10,000 per second aligned to the clock, and
// counts admissions by the window Redis charged them to.
func floodgateSide(t *testing.T, d time.Duration) sideResult {
	srv := redistest.Start(t)
	rule := floodgate.Rule{Name: "global", Algorithm: floodgate.FixedWindow, Limit: sideLimit, Window: time.Second, Align: floodgate.AlignClock, Grant: true}
	lims := make([]*floodgate.Limiter, sideInstances)
	var mu sync.Mutex
	perWindow := map[int64]int64{}
	for i := range lims {
		rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		g := grant.New(rs, nil)
		defer g.Close()
		w := &windowCount{Store: g, mu: &mu, perWindow: perWindow}
		lims[i], err = floodgate.New("hot", w, []floodgate.Rule{rule}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lims[i].Close()
	}
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start))
	ctx := context.Background()
	decisions := pace(start, d, 1, func(i, _ int) { lims[i].AllowKey(ctx, "acme") })
	n := int64(d / time.Second)
	return tally("floodgate", perWindow, start.UnixMicro(), n*1e6, decisions).perSecond(n)
}

// perSecond turns a tally over µs window ids into one over n windows.
func (r sideResult) perSecond(n int64) sideResult {
	r.windows = n
	return r
}

// windowCount counts the admissions a grant store answers by the window
// start they were charged to (µs).
type windowCount struct {
	store.Store
	mu        *sync.Mutex
	perWindow map[int64]int64
}

func (w *windowCount) Apply(ctx context.Context, b *store.Batch) error {
	err := w.Store.Apply(ctx, b)
	if err == nil {
		w.count(b)
	}
	return err
}

func (w *windowCount) count(b *store.Batch) {
	if b.Mode == store.Consume && b.Allowed {
		w.mu.Lock()
		w.perWindow[b.Ops[0].Stamp]++
		w.mu.Unlock()
	}
}

// gubernatorSide runs an in-process gubernator cluster of 4 peers on
// loopback, one client per peer, GLOBAL behaviour, a token bucket (which in
// gubernator refills whole when its duration ends: a window from the
// first hit) of 10,000 per 1,000 ms, requests in batches of sideBatch, and
// counts admissions by the window's reset time the answer gives.
func gubernatorSide(t *testing.T, d time.Duration) sideResult {
	logrus.SetLevel(logrus.ErrorLevel)
	peers := make([]guber.PeerInfo, sideInstances)
	for i := range peers {
		peers[i] = guber.PeerInfo{HTTPAddress: freeAddr(t), GRPCAddress: freeAddr(t)}
	}
	if err := cluster.StartWith(peers); err != nil {
		t.Fatal(err)
	}
	defer stopCluster(t)
	clients := make([]guber.V1Client, sideInstances)
	for i := range clients {
		c, err := guber.DialV1Server(cluster.PeerAt(i).GRPCAddress, nil)
		if err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	var mu sync.Mutex
	perWindow := map[int64]int64{} // by reset time, in ms
	var failed atomic.Int64
	reqs := make([][]*guber.RateLimitReq, sideInstances)
	for i := range reqs {
		for range sideBatch {
			reqs[i] = append(reqs[i], &guber.RateLimitReq{
				Name: "hot", UniqueKey: "acme", Hits: 1, Limit: sideLimit, Duration: 1000,
				Algorithm: guber.Algorithm_TOKEN_BUCKET, Behavior: guber.Behavior_GLOBAL,
			})
		}
	}
	// The bucket's first hit opens its first window: let it, then start the
	// run on that window's end.
	ctx := context.Background()
	first, err := clients[0].GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: reqs[0][:1]})
	if err != nil {
		t.Fatal(err)
	}
	reset := first.Responses[0].ResetTime
	start := time.UnixMilli(reset)
	time.Sleep(time.Until(start))
	decisions := pace(start, d, sideBatch, func(i, n int) {
		resp, err := clients[i].GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: reqs[i]})
		if err != nil {
			failed.Add(1)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range resp.Responses {
			if r.Error == "" && r.Status == guber.Status_UNDER_LIMIT {
				perWindow[windowOf(r.ResetTime, reset)]++
			}
		}
	})
	if f := failed.Load(); f > 0 {
		t.Logf("gubernator: %d calls failed", f)
	}
	n := int64(d / time.Second)
	return tally("gubernator", perWindow, 1, n, decisions)
}

// stopCluster stops the gubernator cluster, waiting at most 10s: in
// v2.13.0 a peer's Close can hang for good after GLOBAL load (its
// broadcast loop stops its Interval while the Interval's goroutine is
// blocked sending the tick that loop would have read), and the run's
// figures are taken by then.
func stopCluster(t *testing.T) {
	stopped := make(chan struct{})
	go func() {
		cluster.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Log("gubernator: cluster.Stop did not return in 10s; its goroutines are left to the process's exit")
	}
}

// windowOf numbers the window a reset time (ms) ends, counting from the
// window that ends at reset0 (0) in windows of a second; peers' reset times
// for one window differ by their clocks' reads, so it rounds.
func windowOf(reset, reset0 int64) int64 {
	return (reset - reset0 + 500) / 1000
}

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
