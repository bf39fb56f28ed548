package grant_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/grant"
	"github.com/floodgate-go/floodgate/store/redis"
)

// WindowsEnv names the environment variable that sets how many windows the
// hot-key runs last (HotWindows by default); `make grant-hot` runs 30.
const windowsEnv = "FLOODGATE_GRANT_WINDOWS"

// hotWindows is how many one-second windows a hot-key run lasts.
func hotWindows(t *testing.T) int {
	if s := os.Getenv(windowsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a whole number of windows", windowsEnv, s)
		}
		return n
	}
	return 4
}

// counted counts the batches that reach the store it wraps: the Redis
// calls of an instance.
type counted struct {
	store.Store
	calls atomic.Int64
}

func (c *counted) Apply(ctx context.Context, b *store.Batch) error {
	c.calls.Add(1)
	return c.Store.Apply(ctx, b)
}

// instance is one floodgate instance of a hot-key run: a limiter over a
// grant store over a Redis store of its own (its own client and pool),
// with the decisions the limiter hands the grant store observed.
type instance struct {
	lim   *floodgate.Limiter
	grant *grant.Store
	redis *counted
	seen  *observed
}

func newInstance(t *testing.T, srv *redistest.Server, rule floodgate.Rule, opts *grant.Options, clock floodgate.Clock) *instance {
	t.Helper()
	rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: clock != nil})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	in := &instance{redis: &counted{Store: rs}}
	in.grant = grant.New(in.redis, opts)
	in.seen = &observed{grant: in.grant, windows: map[int64]int64{}}
	in.lim, err = floodgate.New("hot", in.seen, []floodgate.Rule{rule}, &floodgate.Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// observed counts the consumes a limiter hands a grant store, as the store
// answers them: the decisions and admissions, the admissions by the window
// they were charged to (the stamp: a fixed window's start, on Redis's
// clock), the admissions decided after that window ended, and the earliest and
// latest decision times (the latest as its call returned: the span holds
// every reading of the time Redis made for the run).
type observed struct {
	grant *grant.Store

	mu                  sync.Mutex
	decisions, admitted int64
	windows             map[int64]int64
	outside             int64
	first, last         int64 // µs
}

func (o *observed) Apply(ctx context.Context, b *store.Batch) error {
	if err := o.grant.Apply(ctx, b); err != nil {
		return err
	}
	o.count(b)
	return nil
}

func (o *observed) count(b *store.Batch) {
	if b.Mode != store.Consume {
		return
	}
	// The decision's time (read before the call) is no later than Redis's
	// reading for it, and the time after the call no earlier.
	now, after := b.Now.UnixMicro(), time.Now().UnixMicro()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.decisions == 0 || now < o.first {
		o.first = now
	}
	o.last = max(o.last, after)
	o.decisions++
	if !b.Allowed {
		return
	}
	o.admitted++
	if op := &b.Ops[0]; op.Params.Algorithm == store.FixedWindow {
		o.windows[op.Stamp]++
		// Redis may stamp a decision into the window after the one its
		// time was read in (Redis reads its clock later); never into one
		// that ended before it.
		if now >= op.Stamp+op.Params.Window.Microseconds() {
			o.outside++
		}
	}
}

// hotResult is what a hot-key run measured.
type hotResult struct {
	decisions, admitted, calls int64
	// windows counts admissions by the start of the window they were
	// charged to, in µs; outside, those decided outside it.
	windows     map[int64]int64
	outside     int64
	first, last time.Time // the earliest and latest decision times
	stats       []grant.Stats
}

// runHot runs 4 instances on one key of rule for n windows of a second,
// instance i sending shares[i] of demand decisions per second, paced.
func runHot(t *testing.T, rule floodgate.Rule, demand float64, shares []float64, n int) hotResult {
	srv := redistest.Start(t)
	ins := make([]*instance, len(shares))
	for i := range ins {
		ins[i] = newInstance(t, srv, rule, nil, nil)
	}
	// Start on a whole second, so the run is n whole aligned windows.
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start))
	end := start.Add(time.Duration(n) * time.Second)
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Add(1)
		go func(in *instance, rate float64) {
			defer wg.Done()
			ctx := context.Background()
			var sent int64
			for {
				now := time.Now()
				if !now.Before(end) {
					break
				}
				for due := int64(now.Sub(start).Seconds() * rate); sent < due; sent++ {
					if sent%64 == 0 && !time.Now().Before(end) {
						break // behind the pace: the run still ends on time
					}
					if d := in.lim.AllowKey(ctx, "acme"); d.Err != nil {
						t.Errorf("decision failed: %v", d.Err)
						return
					}
				}
				time.Sleep(100 * time.Microsecond)
			}
		}(in, demand*shares[i])
	}
	wg.Wait()
	res := hotResult{windows: map[int64]int64{}}
	var first, last int64
	for i, in := range ins {
		o := in.seen
		res.decisions += o.decisions
		res.admitted += o.admitted
		res.outside += o.outside
		for w, c := range o.windows {
			res.windows[w] += c
		}
		if i == 0 || o.first < first {
			first = o.first
		}
		last = max(last, o.last)
		res.calls += in.redis.calls.Load()
		res.stats = append(res.stats, in.grant.Stats())
		in.grant.Close()
		in.lim.Close()
	}
	res.first, res.last = time.UnixMicro(first), time.UnixMicro(last)
	return res
}

const hotLimit = 10_000

var (
	even     = []float64{0.25, 0.25, 0.25, 0.25}
	skewed   = []float64{0.9, 1.0 / 30, 1.0 / 30, 1.0 / 30}
	hotFixed = floodgate.Rule{Name: "global", Algorithm: floodgate.FixedWindow, Limit: hotLimit, Window: time.Second, Align: floodgate.AlignClock, Key: []string{"tenant"}, Grant: true}
	hotTB    = floodgate.Rule{Name: "global", Algorithm: floodgate.TokenBucket, Limit: hotLimit, Burst: hotLimit, Window: time.Second, Key: []string{"tenant"}, Grant: true}
)

// TestHotFixedWindow is the acceptance run: 4 instances, one key, a fixed
// window of 10,000 per second, demand 10x: never over the limit in any
// window, at least 97% of it admitted (95% when one instance sends 90%),
// at most 0.02 Redis calls per decision.
func TestHotFixedWindow(t *testing.T) {
	if testing.Short() {
		t.Skip("a timed run of several seconds")
	}
	for _, c := range []struct {
		name   string
		shares []float64
		want   float64
	}{{"even", even, 0.97}, {"90-10", skewed, 0.95}} {
		t.Run(c.name, func(t *testing.T) {
			n := hotWindows(t)
			r := runHot(t, hotFixed, 10*hotLimit, c.shares, n)
			var full int64
			for w, got := range r.windows {
				if got > hotLimit {
					t.Errorf("window from %v: %d admitted, over the limit of %d", time.UnixMicro(w), got, hotLimit)
				}
				if w >= r.first.Truncate(time.Second).UnixMicro() && w < r.first.Truncate(time.Second).Add(time.Duration(n)*time.Second).UnixMicro() {
					full += got
				}
			}
			if r.outside > 0 {
				t.Errorf("%d admissions decided after the window they were charged to ended", r.outside)
			}
			used := float64(full) / float64(hotLimit*n)
			perDecision := float64(r.calls) / float64(r.decisions)
			t.Logf("%d windows, demand %.1fx the limit: %d admitted (%.2f%% of the limit), %d Redis calls (%.4f per decision); grants %+v",
				n, float64(r.decisions)/float64(hotLimit*n), r.admitted, 100*used, r.calls, perDecision, r.stats)
			if used < c.want {
				t.Errorf("%.2f%% of the limit admitted, want at least %.0f%%", 100*used, 100*c.want)
			}
			if perDecision > 0.02 {
				t.Errorf("%.4f Redis calls per decision, want at most 0.02", perDecision)
			}
		})
	}
}

// TestHotTokenBucket is the same run with a token bucket of 10,000 per
// second, burst 10,000, against its exact allowance over the run: the burst
// and the refill from the first call to the end of the last.
func TestHotTokenBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("a timed run of several seconds")
	}
	for _, c := range []struct {
		name   string
		shares []float64
		want   float64
	}{{"even", even, 0.97}, {"90-10", skewed, 0.95}} {
		t.Run(c.name, func(t *testing.T) {
			n := hotWindows(t)
			r := runHot(t, hotTB, 10*hotLimit, c.shares, n)
			allowance := float64(hotLimit) + hotLimit*r.last.Sub(r.first).Seconds()
			used := float64(r.admitted) / allowance
			perDecision := float64(r.calls) / float64(r.decisions)
			t.Logf("%d s, demand %.1fx the rate: %d admitted of an allowance of %.0f (%.2f%%), %d Redis calls (%.4f per decision); grants %+v",
				n, float64(r.decisions)/float64(hotLimit*n), r.admitted, allowance, 100*used, r.calls, perDecision, r.stats)
			if float64(r.admitted) > allowance {
				t.Errorf("%d admitted, over the allowance of %.0f", r.admitted, allowance)
			}
			if used < c.want {
				t.Errorf("%.2f%% of the allowance admitted, want at least %.0f%%", 100*used, 100*c.want)
			}
			if perDecision > 0.02 {
				t.Errorf("%.4f Redis calls per decision, want at most 0.02", perDecision)
			}
		})
	}
}

// TestHotBelowHalf: with demand under half the limit no request is denied,
// however the grants are spread over the instances.
func TestHotBelowHalf(t *testing.T) {
	if testing.Short() {
		t.Skip("a timed run of several seconds")
	}
	for _, rule := range []floodgate.Rule{hotFixed, hotTB} {
		t.Run(rule.Algorithm.String(), func(t *testing.T) {
			r := runHot(t, rule, 0.45*hotLimit, even, 2)
			if r.admitted != r.decisions {
				t.Errorf("%d of %d decisions denied at 45%% of the limit", r.decisions-r.admitted, r.decisions)
			}
		})
	}
}
