package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/internal/syncbuf"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/redis/rueidis"
)

// faultMargin is how much longer than its deadline a decision may take on a
// loaded test machine (the race detector, other tests on two cores).
const faultMargin = 150 * time.Millisecond

// load runs decisions on distinct keys from a few goroutines until stop is
// called, and checks each one's latency and outcome.
type load struct {
	t        *testing.T
	lim      *floodgate.Limiter
	deadline time.Duration
	stop     chan struct{}
	wg       sync.WaitGroup

	slowest   atomic.Int64 // ns
	decisions atomic.Int64
	failures  atomic.Int64 // decided by the failure policy
	wrong     atomic.Int64 // store failures that admitted (the policy is closed)
}

func startLoad(t *testing.T, lim *floodgate.Limiter, deadline time.Duration, workers int) *load {
	l := &load{t: t, lim: lim, deadline: deadline, stop: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				d := lim.Allow(context.Background(), floodgate.Attributes{"user": fmt.Sprint(w, "-", i%50)})
				el := time.Since(start)
				for {
					s := l.slowest.Load()
					if int64(el) <= s || l.slowest.CompareAndSwap(s, int64(el)) {
						break
					}
				}
				l.decisions.Add(1)
				if d.Reason == floodgate.ReasonStore {
					l.failures.Add(1)
					if d.Allowed {
						l.wrong.Add(1)
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	return l
}

// snapshot returns and resets the slowest latency and the counters.
func (l *load) snapshot() (slowest time.Duration, decisions, failures, wrong int64) {
	return time.Duration(l.slowest.Swap(0)), l.decisions.Swap(0), l.failures.Swap(0), l.wrong.Swap(0)
}

func (l *load) halt() {
	close(l.stop)
	l.wg.Wait()
}

// waitGoroutines waits for the goroutine count to come back to at most n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d, want at most %d\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisFaults hangs Redis, kills it and restarts it empty under load.
// Every decision returns within the deadline and a margin, store failures
// follow the closed policy, the breaker opens, and enforcement resumes on
// its own within a second of the restart. No goroutines are left behind.
func TestRedisFaults(t *testing.T) {
	base := runtime.NumGoroutine()
	srv := redistest.Start(t)
	st, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 50 * time.Millisecond
	opts := &floodgate.Options{FailurePolicy: floodgate.FailClosed}
	breaker := store.BreakerOptions{Failures: 5, Cooldown: 200 * time.Millisecond}
	g := guarded(t, st, deadline, breaker)
	rules := []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1_000_000, Window: time.Hour, Key: []string{"user"}}}
	lim, err := floodgate.New("faults", g, rules, opts)
	if err != nil {
		t.Fatal(err)
	}
	strict, err := floodgate.New("strict", guarded(t, st, deadline, breaker), []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 5, Window: time.Hour}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(t, lim, deadline, 8)
	defer l.halt()

	check := func(phase string, wantFailures bool) {
		t.Helper()
		slowest, n, failures, wrong := l.snapshot()
		t.Logf("%s: %d decisions, %d by policy, slowest %v", phase, n, failures, slowest)
		if slowest > deadline+faultMargin {
			t.Errorf("%s: slowest decision took %v, over %v", phase, slowest, deadline+faultMargin)
		}
		if wrong > 0 {
			t.Errorf("%s: %d store failures admitted under the closed policy", phase, wrong)
		}
		if wantFailures != (failures > 0) || n == 0 {
			t.Errorf("%s: %d of %d decisions by policy", phase, failures, n)
		}
	}
	waitBreaker := func(phase string, want store.BreakerState) {
		t.Helper()
		for end := time.Now().Add(2 * time.Second); g.State() != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: breaker %v, want %v", phase, g.State(), want)
			}
		}
	}

	time.Sleep(300 * time.Millisecond)
	check("healthy", false)

	srv.Pause()
	waitBreaker("hung", store.BreakerOpen)
	time.Sleep(500 * time.Millisecond)
	check("hung", true)
	srv.Resume()
	time.Sleep(500 * time.Millisecond)
	waitBreaker("resumed", store.BreakerClosed)
	l.snapshot()

	srv.Kill()
	waitBreaker("killed", store.BreakerOpen)
	time.Sleep(500 * time.Millisecond)
	check("killed", true)

	srv.Restart()
	restarted := time.Now()
	for {
		d := strict.Allow(context.Background(), nil)
		if d.Reason != floodgate.ReasonStore {
			if !d.Allowed {
				t.Fatalf("first decision after restart denied: %+v", d)
			}
			break
		}
		if time.Since(restarted) > time.Second {
			t.Fatalf("enforcement did not resume within 1s of the restart: %v", d.Err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("enforcement resumed %v after the restart", time.Since(restarted))
	for i := 1; i < 7; i++ {
		d := strict.Allow(context.Background(), nil)
		if d.Reason == floodgate.ReasonStore || d.Allowed != (i < 5) {
			t.Fatalf("decision %d after restart: allowed=%v reason=%v, want allowed=%v", i+1, d.Allowed, d.Reason, i < 5)
		}
	}
	time.Sleep(300 * time.Millisecond)
	l.snapshot()
	time.Sleep(300 * time.Millisecond)
	check("restarted", false)

	l.halt()
	l.stop = make(chan struct{}) // the deferred halt finds nothing to stop
	st.Close()
	srv.Kill()
	waitGoroutines(t, base+2)
}

// TestFirstCallAfterEmptyRestart kills Redis and restarts it empty (no
// keys, no library) between decisions, on a store with two connections,
// each used before the kill: the first decision after each restart is
// answered by the rule. Its call meets connections the server closed, which
// are found dead only when written to, and then a node without the library,
// whose load may itself meet a closed connection: the store sends the call
// again and loads the library until it is answered.
func TestFirstCallAfterEmptyRestart(t *testing.T) {
	srv := redistest.Start(t)
	st := serverStore(t, []string{srv.Addr}, false, func(o *redis.Options) { o.PipelineMultiplex = 1 })
	lim, err := floodgate.New("restart", guarded(t, st, 2*time.Second, store.BreakerOptions{}), []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour}},
		&floodgate.Options{FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := range 5 {
		for i := range 20 { // each call takes one of the connections at random
			if d := lim.Allow(ctx, nil); !d.Allowed {
				t.Fatalf("round %d: decision %d before the restart: %+v", round, i, d)
			}
		}
		srv.Kill()
		srv.Restart()
		if d := lim.Allow(ctx, nil); d.Reason != floodgate.ReasonNone || !d.Allowed || d.Remaining != 999 {
			t.Fatalf("round %d: the first decision after an empty restart: allowed=%v reason=%v remaining=%d err=%v, want admitted by the rule with 999 left",
				round, d.Allowed, d.Reason, d.Remaining, d.Err)
		}
	}
	if keys, err := srv.KeysWithoutTTL(); err != nil || len(keys) > 0 {
		t.Fatalf("keys without a TTL: %v (%v)", keys, err)
	}
}

// TestClusterNodeKilled kills one master of a Cluster: decisions whose keys
// live on the other masters keep working.
func TestClusterNodeKilled(t *testing.T) {
	base := runtime.NumGoroutine()
	cl := redistest.StartCluster(t)
	st, err := redis.New(&redis.Options{Cluster: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	opts := &floodgate.Options{FailurePolicy: floodgate.FailClosed}
	lim, err := floodgate.New("nodes", guarded(t, st, 500*time.Millisecond, store.BreakerOptions{Failures: -1}), []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour, Key: []string{"user"}}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	victim := cl.Nodes[0]
	owner := slotOwners(t, cl.Nodes[1])
	users := make([]string, 40)
	onVictim := make([]bool, len(users))
	for i := range users {
		users[i] = fmt.Sprint("user", i)
		slot, _ := strconv.Atoi(cl.Nodes[1].MustDo("CLUSTER", "KEYSLOT", "fg:{nodes/r@1h:"+users[i]+"}:fixed"))
		onVictim[i] = owner[slot] == victim.Addr
	}
	ctx := context.Background()
	for _, u := range users {
		if d := lim.Allow(ctx, floodgate.Attributes{"user": u}); !d.Allowed {
			t.Fatalf("before the kill: %+v", d)
		}
	}
	victim.Kill()
	var live, dead int
	for i, u := range users {
		d := lim.Allow(ctx, floodgate.Attributes{"user": u})
		if onVictim[i] {
			dead++
			if d.Reason != floodgate.ReasonStore || d.Allowed {
				t.Errorf("key on the killed node: allowed=%v reason=%v, want a closed store failure", d.Allowed, d.Reason)
			}
			continue
		}
		live++
		if d.Reason == floodgate.ReasonStore || !d.Allowed || d.Remaining != 1 {
			t.Errorf("key on a live node: allowed=%v reason=%v remaining=%d err=%v", d.Allowed, d.Reason, d.Remaining, d.Err)
		}
	}
	if live == 0 || dead == 0 {
		t.Fatalf("keys on live nodes %d, on the killed node %d: want some of each", live, dead)
	}
	st.Close()
	for _, n := range cl.Nodes {
		n.Kill()
	}
	waitGoroutines(t, base+2)
}

// slotOwners maps each slot to its master's address, from CLUSTER NODES.
func slotOwners(t *testing.T, n *redistest.Server) map[int]string {
	out := map[int]string{}
	for _, line := range strings.Split(n.MustDo("CLUSTER", "NODES"), "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || !strings.Contains(f[2], "master") {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		for _, r := range f[8:] {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, _ := strconv.Atoi(lo)
			b, _ := strconv.Atoi(hi)
			for s := a; s <= b; s++ {
				out[s] = addr
			}
		}
	}
	return out
}

// TestStartWhileRedisIsDown starts a store against a Redis that is down:
// New fails fast (a fallback is the limiter's business).
func TestStartWhileRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	url := "redis://" + srv.Addr + "/0"
	if st, err := redis.New(&redis.Options{URL: url, DialTimeout: 200 * time.Millisecond}); err == nil {
		st.Close()
		t.Fatal("New succeeded with Redis down")
	}
}

// TestClientClusterStartupChecks gives the store a caller's rueidis
// Cluster client on a Cluster with Redis's defaults and no replicas: the
// store reads the slot map (CLUSTER SLOTS) and the coverage setting
// (CONFIG GET) through that client, and warns about both.
func TestClientClusterStartupChecks(t *testing.T) {
	cl := redistest.StartClusterWith(t, redistest.ClusterOptions{})
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: cl.Addrs(), DisableCache: true, DisableRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var logs syncbuf.Buffer
	st, err := redis.NewFromClient(client, &redis.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, want := range []string{"masters without replicas", "cluster-require-full-coverage is yes"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("start-up log lacks %q:\n%s", want, logs.String())
		}
	}
	lim, err := floodgate.New("fault", st, []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}}}, patient)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 20 { // keys on every master
		user := floodgate.Attributes{"user": "u" + strconv.Itoa(i)}
		if d := lim.Allow(ctx, user); !d.Allowed {
			t.Fatalf("user %d: first decision %+v", i, d)
		}
		if d := lim.Allow(ctx, user); d.Allowed || d.Reason != floodgate.ReasonLimit {
			t.Fatalf("user %d: second decision %+v, want denied by the limit", i, d)
		}
	}
}
