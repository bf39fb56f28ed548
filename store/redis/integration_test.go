package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redis"
	goredis "github.com/redis/go-redis/v9"
)

// serverStore returns a store on srv that uses the server's clock, as in
// production.
func serverStore(t testing.TB, addrs []string, cluster bool, edit func(*redis.Options)) *redis.Store {
	t.Helper()
	o := &redis.Options{}
	if cluster {
		o.Cluster = addrs
	} else {
		o.URL = "redis://" + addrs[0]
	}
	if edit != nil {
		edit(o)
	}
	s, err := redis.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// patient are limiter options for load tests: a deadline long enough for a
// loaded test machine, and fail-closed, so a store failure can never pass
// for an admission.
var patient = &floodgate.Options{Timeout: 10 * time.Second, FailurePolicy: floodgate.FailClosed}

// TestExactAdmission runs 5,000 concurrent requests through 4 limiters, each
// with its own client, on one Redis and a limit of 1,000: exactly 1,000 are
// admitted, for every algorithm.
func TestExactAdmission(t *testing.T) {
	srv := redistest.Start(t)
	const instances, requests, limit = 4, 5000, 1000
	for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Concurrency} {
		t.Run(alg.String(), func(t *testing.T) {
			rule := floodgate.Rule{Name: "r", Algorithm: alg, Limit: limit, Window: 24 * time.Hour}
			var lims []*floodgate.Limiter
			for range instances {
				l, err := floodgate.New("exact", serverStore(t, []string{srv.Addr}, false, nil), []floodgate.Rule{rule}, patient)
				if err != nil {
					t.Fatal(err)
				}
				lims = append(lims, l)
			}
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for i := range requests {
				wg.Go(func() {
					d := lims[i%instances].Allow(context.Background(), nil)
					if d.Reason == floodgate.ReasonStore {
						failed.Add(1)
					}
					if d.Allowed {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if failed.Load() != 0 || admitted.Load() != limit {
				t.Fatalf("admitted %d (store failures %d), want exactly %d", admitted.Load(), failed.Load(), limit)
			}
		})
	}
}

// TestOneCallPerDecision counts server commands: a decision over three
// rules is one EVALSHA and nothing else.
func TestOneCallPerDecision(t *testing.T) {
	srv := redistest.Start(t)
	store := serverStore(t, []string{srv.Addr}, false, nil)
	lim, err := floodgate.New("calls", store, []floodgate.Rule{
		{Name: "user", Algorithm: floodgate.SlidingWindow, Limit: 1000, Window: time.Minute, Key: []string{"user"}},
		{Name: "tenant", Algorithm: floodgate.TokenBucket, Limit: 1000, Window: time.Minute, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.GCRA, Limit: 1000, Window: time.Minute},
	}, patient)
	if err != nil {
		t.Fatal(err)
	}
	attrs := floodgate.Attributes{"user": "u", "tenant": "t"}
	lim.Allow(context.Background(), attrs) // loads the script
	srv.MustDo("CONFIG", "RESETSTAT")
	const n = 200
	for range n {
		if d := lim.Allow(context.Background(), attrs); !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
	}
	// INFO commandstats also counts the commands scripts run; TIME runs
	// once per script call.
	calls := srv.CommandCalls()
	if calls["evalsha"] != n || calls["eval"] != 0 || calls["time"] != n {
		t.Fatalf("commands for %d decisions: %v, want evalsha=%d, eval=0, time=%d", n, calls, n, n)
	}
	t.Logf("commands, with those the script ran: %v", calls)
}

// TestCoalescedCalls runs concurrent three-rule decisions on one store:
// they may share script calls (never more calls than decisions, plus one
// TIME per call), and admission stays exact.
func TestCoalescedCalls(t *testing.T) {
	srv := redistest.Start(t)
	store := serverStore(t, []string{srv.Addr}, false, nil)
	const n, limit = 400, 250
	lim, err := floodgate.New("coalesce", store, []floodgate.Rule{
		{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour, Key: []string{"user"}},
		{Name: "tenant", Algorithm: floodgate.TokenBucket, Limit: 1000, Window: time.Hour, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.GCRA, Limit: limit, Window: time.Hour},
	}, patient)
	if err != nil {
		t.Fatal(err)
	}
	lim.Peek(context.Background(), nil, 1) // loads the script
	srv.MustDo("CONFIG", "RESETSTAT")
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d := lim.Allow(context.Background(), floodgate.Attributes{"user": strconv.Itoa(i % 37), "tenant": strconv.Itoa(i % 5)})
			if d.Reason == floodgate.ReasonStore {
				failed.Add(1)
			}
			if d.Allowed {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if failed.Load() != 0 || admitted.Load() != limit {
		t.Fatalf("admitted %d (store failures %d), want exactly %d", admitted.Load(), failed.Load(), limit)
	}
	calls := srv.CommandCalls()
	if calls["evalsha"] < 1 || calls["evalsha"] > n || calls["eval"] != 0 || calls["time"] != calls["evalsha"] {
		t.Fatalf("commands for %d concurrent decisions: %v, want 1 to %d evalsha, one time each, no eval", n, calls, n)
	}
	t.Logf("%d concurrent decisions: %d script calls", n, calls["evalsha"])
}

// TestScriptsReload flushes the server's scripts: decisions go on (NOSCRIPT
// falls back to EVAL, which loads the script again).
func TestScriptsReload(t *testing.T) {
	srv := redistest.Start(t)
	store := serverStore(t, []string{srv.Addr}, false, nil)
	lim, err := floodgate.New("reload", store, []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour}}, patient)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		srv.MustDo("SCRIPT", "FLUSH")
		d := lim.Allow(context.Background(), nil)
		if d.Reason == floodgate.ReasonStore || d.Allowed != (i < 3) {
			t.Fatalf("decision %d after SCRIPT FLUSH: %+v", i, d)
		}
	}
}

// TestEveryKeyHasTTL checks that no key the scripts write is left without
// an expiry, for every algorithm and mode.
func TestEveryKeyHasTTL(t *testing.T) {
	srv := redistest.Start(t)
	store := serverStore(t, []string{srv.Addr}, false, func(o *redis.Options) { o.DenyCacheSize = -1 })
	var rules []floodgate.Rule
	for i, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA, floodgate.Concurrency} {
		rules = append(rules, floodgate.Rule{Name: fmt.Sprint("r", i), Algorithm: alg, Limit: 3, Window: time.Hour, Key: []string{"u"}})
	}
	rules = append(rules, floodgate.Rule{Name: "month", Algorithm: floodgate.FixedWindow, Limit: 3, Align: floodgate.AlignMonth, Key: []string{"u"}})
	lim, err := floodgate.New("ttl", store, rules, patient)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 4 {
		attrs := floodgate.Attributes{"u": strconv.Itoa(i)}
		d := lim.Allow(ctx, attrs)
		lim.Record(ctx, attrs, 2)
		lim.Refund(ctx, d.Ticket())
		lim.Allow(ctx, attrs)
	}
	keys := strings.Fields(srv.MustDo("KEYS", "*"))
	if len(keys) == 0 {
		t.Fatal("no keys written")
	}
	for _, k := range keys {
		if ttl := srv.MustDo("PTTL", k); ttl == "-1" {
			t.Errorf("key %q has no TTL", k)
		}
	}
}

// TestCluster runs a three-rule decision whose keys live in different slots
// on a three-master Cluster: no rule ever admits more than its limit, and
// once the run ends every counter equals the hits admitted (denied
// decisions were compensated).
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	const instances, requests = 3, 1500
	limits := map[string]int64{"user": 300, "tenant": 500, "global": 1000}
	rules := []floodgate.Rule{
		{Name: "user", Algorithm: floodgate.FixedWindow, Limit: limits["user"], Window: time.Hour, Key: []string{"user"}},
		{Name: "tenant", Algorithm: floodgate.FixedWindow, Limit: limits["tenant"], Window: time.Hour, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.FixedWindow, Limit: limits["global"], Window: time.Hour},
	}
	var lims []*floodgate.Limiter
	for range instances {
		l, err := floodgate.New("cl", serverStore(t, cl.Addrs(), true, nil), rules, patient)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	// Half the requests come from a second user, limited only by tenant
	// and global, so every rule gets to deny some decisions.
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			u := i % 2
			d := lims[i%instances].Allow(context.Background(), floodgate.Attributes{"user": fmt.Sprint("u", u), "tenant": "t"})
			if d.Reason == floodgate.ReasonStore {
				t.Errorf("store failure: %v", d.Err)
			}
			if d.Allowed {
				admitted[u].Add(1)
			}
		})
	}
	wg.Wait()
	a0, a1 := admitted[0].Load(), admitted[1].Load()
	if a0 > limits["user"] || a1 > limits["user"] || a0+a1 > limits["tenant"] {
		t.Fatalf("admitted %d + %d, over the limits %v", a0, a1, limits)
	}
	counter := func(rule, key string) int64 {
		k := "fg:{cl/" + rule + ":" + key + "}:f"
		for _, n := range cl.Nodes {
			if v, err := n.Do("GET", k); err == nil && len(v) == 24 {
				return int64(binary.LittleEndian.Uint64([]byte(v[8:16])))
			}
		}
		return 0
	}
	if got := counter("user", "u0"); got != a0 {
		t.Errorf("user u0 counter %d, admitted %d", got, a0)
	}
	if got := counter("user", "u1"); got != a1 {
		t.Errorf("user u1 counter %d, admitted %d", got, a1)
	}
	if got := counter("tenant", "t"); got != a0+a1 {
		t.Errorf("tenant counter %d, admitted %d", got, a0+a1)
	}
	if got := counter("global", "*"); got != a0+a1 {
		t.Errorf("global counter %d, admitted %d", got, a0+a1)
	}
	t.Logf("admitted %d + %d of %d", a0, a1, requests)
}

// TestConnectionOptions connects over a unix socket with a password, and
// with an ACL user and password in the URL, and makes a decision each way.
func TestConnectionOptions(t *testing.T) {
	sock := t.TempDir() + "/redis.sock"
	srv := redistest.Start(t, "--unixsocket", sock, "--unixsocketperm", "700", "--requirepass", "secret")
	for _, tc := range []struct {
		name string
		opts *redis.Options
	}{
		{"unix+password", &redis.Options{URL: "unix://" + sock, Password: "secret"}},
		{"url-user", &redis.Options{URL: "redis://default:secret@" + srv.Addr + "/2"}},
		{"bad-password", &redis.Options{URL: "redis://" + srv.Addr, Password: "wrong"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redis.New(tc.opts)
			if tc.name == "bad-password" {
				if err == nil {
					s.Close()
					t.Fatal("connected with a wrong password")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			lim, err := floodgate.New("conn", s, []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour}}, patient)
			if err != nil {
				t.Fatal(err)
			}
			if d := lim.Allow(context.Background(), nil); !d.Allowed || d.Reason != floodgate.ReasonNone {
				t.Fatalf("first decision: %+v", d)
			}
		})
	}
}

// TestSentinel finds the master through a Sentinel and makes decisions on it.
func TestSentinel(t *testing.T) {
	master := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, master)
	s, err := redis.New(&redis.Options{Sentinel: &redis.Sentinel{Master: "mymaster", Addrs: []string{sentinel.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lim, err := floodgate.New("sentinel", s, []floodgate.Rule{{Name: "r", Algorithm: floodgate.TokenBucket, Limit: 2, Window: time.Hour}}, patient)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if d := lim.Allow(context.Background(), nil); d.Allowed != (i < 2) || d.Reason == floodgate.ReasonStore {
			t.Fatalf("decision %d: %+v", i, d)
		}
	}
	if n := master.MustDo("DBSIZE"); n != "1" {
		t.Fatalf("master holds %s keys, want 1", n)
	}
}

// TestGoRedisRing refuses a go-redis Ring, which could count one rule key on
// several shards.
func TestGoRedisRing(t *testing.T) {
	ring := goredis.NewRing(&goredis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if s, err := redis.New(&redis.Options{GoRedis: ring}); err == nil {
		s.Close()
		t.Fatal("a Ring was accepted")
	}
}
