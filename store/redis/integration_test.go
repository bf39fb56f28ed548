package redis_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redis"
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

// patient are limiter options for load tests: no deadline (the store is
// not guarded), and fail-closed, so a store failure can never pass for an
// admission.
var patient = &floodgate.Options{FailurePolicy: floodgate.FailClosed}

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
// rules is one FCALL and nothing else.
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
	lim.Allow(context.Background(), attrs)
	srv.MustDo("CONFIG", "RESETSTAT")
	const n = 200
	for range n {
		if d := lim.Allow(context.Background(), attrs); !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
	}
	// INFO commandstats also counts the commands the function runs; TIME
	// runs once per call.
	calls := srv.CommandCalls()
	if calls["fcall"] != n || calls["function|load"] != 0 || calls["time"] != n {
		t.Fatalf("commands for %d decisions: %v, want fcall=%d, no function load, time=%d", n, calls, n, n)
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
	lim.Peek(context.Background(), nil, 1)
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
	if calls["fcall"] < 1 || calls["fcall"] > n || calls["time"] != calls["fcall"] {
		t.Fatalf("commands for %d concurrent decisions: %v, want 1 to %d fcall, one time each", n, calls, n)
	}
	t.Logf("%d concurrent decisions: %d function calls", n, calls["fcall"])
}

// TestLibraryReload flushes the server's functions before every decision:
// decisions go on (a call that finds no function loads the library and is
// sent again).
func TestLibraryReload(t *testing.T) {
	srv := redistest.Start(t)
	store := serverStore(t, []string{srv.Addr}, false, nil)
	lim, err := floodgate.New("reload", store, []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour}}, patient)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		srv.MustDo("FUNCTION", "FLUSH")
		d := lim.Allow(context.Background(), nil)
		if d.Reason == floodgate.ReasonStore || d.Allowed != (i < 3) {
			t.Fatalf("decision %d after FUNCTION FLUSH: %+v", i, d)
		}
	}
}

// TestEveryKeyHasTTL checks that no key the scripts write is left without
// an expiry, for every algorithm and mode.
func TestEveryKeyHasTTL(t *testing.T) {
	srv := redistest.Start(t)
	store := serverStore(t, []string{srv.Addr}, false, nil)
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
		d := must(lim.Decide(ctx, floodgate.ModeConsume, attrs, 1))
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
	t.Parallel()
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
		k := "fg:{cl/" + rule + "@1h:" + key + "}:fixed"
		for _, n := range cl.Nodes {
			if v, err := n.Do("HGET", k, "n"); err == nil && v != "" {
				return fixedCount(t, v)
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

// TestClusterTagLimiter runs a limiter whose two rules have different keys
// on a three-master Cluster with HashTag TagLimiter: all its keys share the
// tag {limiter}, so every decision is exactly one script call (counted over
// the masters' commandstats), and concurrent decisions admit exactly the limit.
// A concurrency rule's lease set and a refund's ticket use the same tag.
func TestClusterTagLimiter(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	const instances, requests = 3, 1000
	rules := []floodgate.Rule{
		{Name: "rpm", Algorithm: floodgate.FixedWindow, Limit: 150, Window: time.Hour, Key: []string{"route"}},
		{Name: "upm", Algorithm: floodgate.SlidingWindow, Limit: 100, Window: time.Hour, Key: []string{"user"}},
	}
	tagged := func(o *redis.Options) { o.HashTag = redis.TagLimiter }
	var lims []*floodgate.Limiter
	for range instances {
		l, err := floodgate.New("gw", serverStore(t, cl.Addrs(), true, tagged), rules, patient)
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, l)
	}
	for _, l := range lims { // loads the script on the limiter's node
		if d := l.Allow(context.Background(), floodgate.Attributes{"route": "warm", "user": "warm"}); !d.Allowed {
			t.Fatalf("warm-up denied: %+v", d)
		}
	}
	for _, n := range cl.Nodes {
		n.MustDo("CONFIG", "RESETSTAT")
	}
	// Two users share one route: each is capped at 100 by upm and together
	// at 150 by rpm, so both rules deny some decisions.
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			u := i % 2
			d := lims[i%instances].Allow(context.Background(), floodgate.Attributes{"route": "r", "user": fmt.Sprint("u", u)})
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
	if a0 > 100 || a1 > 100 || a0+a1 != 150 {
		t.Fatalf("admitted %d + %d, want at most 100 each and exactly 150 in all", a0, a1)
	}
	var fcall, busy int64
	for _, n := range cl.Nodes {
		c := n.CommandCalls()
		fcall += c["fcall"]
		if c["fcall"] > 0 {
			busy++
		}
	}
	if fcall != requests || busy != 1 {
		t.Fatalf("function calls for %d decisions: %d on %d masters, want %d on 1", requests, fcall, busy, requests)
	}
	// The keys carry the limiter's tag and hold exactly what was admitted.
	counter := func(k string) (int64, string) {
		for _, n := range cl.Nodes {
			if v, err := n.Do("HGET", k, "n"); err == nil && v != "" {
				slot := n.MustDo("CLUSTER", "KEYSLOT", k)
				return fixedCount(t, v), slot
			}
		}
		return 0, ""
	}
	want := cl.Nodes[0].MustDo("CLUSTER", "KEYSLOT", "gw")
	if got, slot := counter("fg:{gw}/rpm@1h:r:fixed"); got != a0+a1 || slot != want {
		t.Errorf("rpm counter %d in slot %s, want %d in slot %s", got, slot, a0+a1, want)
	}
	for _, k := range []string{"fg:{gw}/upm@1h:u0:sliding", "fg:{gw}/upm@1h:u1:sliding"} {
		found := false
		for _, n := range cl.Nodes {
			if v, err := n.Do("EXISTS", k); err == nil && v == "1" {
				found = true
				if slot := n.MustDo("CLUSTER", "KEYSLOT", k); slot != want {
					t.Errorf("%s in slot %s, want %s", k, slot, want)
				}
			}
		}
		if !found {
			t.Errorf("%s not found", k)
		}
	}

	// A concurrency rule (state and lease set) beside a rate rule, with a
	// refund (its spent-ticket key): one script call each, in one slot.
	conc, err := floodgate.New("gwc", serverStore(t, cl.Addrs(), true, tagged), []floodgate.Rule{
		{Name: "inflight", Algorithm: floodgate.Concurrency, Limit: 2, Window: time.Minute, Key: []string{"route"}},
		{Name: "rpm", Algorithm: floodgate.FixedWindow, Limit: 1000, Window: time.Hour, Key: []string{"user"}},
	}, patient)
	if err != nil {
		t.Fatal(err)
	}
	attrs := floodgate.Attributes{"route": "r", "user": "u"}
	first := must(conc.Decide(context.Background(), floodgate.ModeConsume, attrs, 1))
	if !first.Allowed {
		t.Fatalf("first denied: %+v", first)
	}
	for _, n := range cl.Nodes {
		n.MustDo("CONFIG", "RESETSTAT")
	}
	if d := conc.Allow(context.Background(), attrs); !d.Allowed {
		t.Fatalf("second denied: %+v", d)
	}
	if d := conc.Allow(context.Background(), attrs); d.Allowed {
		t.Fatalf("third admitted over the concurrency limit of 2")
	}
	if err := conc.Refund(context.Background(), first.Ticket()); err != nil {
		t.Fatal(err)
	}
	if err := conc.Refund(context.Background(), first.Ticket()); err != nil { // spent: a no-op
		t.Fatal(err)
	}
	if d := conc.Allow(context.Background(), attrs); !d.Allowed {
		t.Fatalf("denied after a refund: %+v", d)
	}
	if d := conc.Allow(context.Background(), attrs); d.Allowed {
		t.Fatalf("admitted over the limit after a repeated refund")
	}
	fcall, busy = 0, 0
	for _, n := range cl.Nodes {
		c := n.CommandCalls()
		fcall += c["fcall"]
		if c["fcall"] > 0 {
			busy++
		}
	}
	if fcall != 6 || busy != 1 {
		t.Fatalf("function calls for 6 decisions: %d on %d masters, want 6 on 1", fcall, busy)
	}
}

// TestSentinelFailover hangs the master under a Sentinel-configured store:
// the Sentinel promotes the replica, the client follows it, and decisions
// are answered by Redis again, with the limit still enforced from the
// replicated state. Replication is asynchronous, so a failover may lose the
// last writes before it (a limit then admits up to that many more); the
// test lets every write replicate before the master hangs, so it sees none
// lost.
func TestSentinelFailover(t *testing.T) {
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	sentinel := redistest.StartSentinel(t, master,
		"sentinel down-after-milliseconds mymaster 300",
		"sentinel failover-timeout mymaster 2000")
	for deadline := time.Now().Add(10 * time.Second); ; {
		if role, _ := replica.Do("ROLE"); strings.Contains(role, "\nconnected\n") {
			break // the replica has synced with the master
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not sync with the master within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The Sentinel learns of replicas from the master's INFO, which it
	// reads every 10s: a failover before that would find no replica.
	for deadline := time.Now().Add(15 * time.Second); ; {
		if r, _ := sentinel.Do("SENTINEL", "REPLICAS", "mymaster"); strings.Contains(r, strconv.Itoa(replica.Port)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Sentinel did not discover the replica within 15s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, err := redis.New(&redis.Options{Sentinel: &redis.Sentinel{Master: "mymaster", Addrs: []string{sentinel.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const limit = 5
	lim, err := floodgate.New("failover", guarded(t, s, time.Second, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: limit, Window: time.Hour, Key: []string{"user"}},
	}, &floodgate.Options{FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	user := floodgate.Attributes{"user": "u1"}
	for i := range 3 {
		if d := lim.Allow(ctx, user); !d.Allowed || d.Reason == floodgate.ReasonStore {
			t.Fatalf("decision %d before the failover: %+v", i, d)
		}
	}
	// Let the replica catch up with every write. (WAIT would not do: it
	// waits for the writes of its own connection, and this one made none.)
	caughtUp := time.Now().Add(5 * time.Second)
	for !replicaCaughtUp(t, master) {
		if time.Now().After(caughtUp) {
			t.Fatal("the replica did not catch up with the master within 5s")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A hung master rather than a killed one: a killed master's port is
	// free, and a redis-server another test process starts could take it
	// and pass for the master come back, empty.
	master.Pause()
	defer master.Kill()
	start := time.Now()
	var d floodgate.Decision
	for {
		d = lim.Allow(ctx, user)
		if d.Reason != floodgate.ReasonStore {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("no decision answered by Redis 20s after the master hung: %+v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("answered by the promoted replica %v after the master hung", time.Since(start).Round(time.Millisecond))
	if role, _ := replica.Do("ROLE"); !strings.HasPrefix(role, "master") {
		t.Errorf("the replica's role after the failover: %q", role)
	}
	// 3 were admitted before, this is the 4th: one more fits, then denial.
	if !d.Allowed || d.Remaining != limit-4 {
		t.Errorf("first decision after the failover: Allowed=%v Remaining=%d, want admitted with %d left", d.Allowed, d.Remaining, limit-4)
	}
	if d := lim.Allow(ctx, user); !d.Allowed {
		t.Errorf("5th decision: %+v, want admitted", d)
	}
	if d := lim.Allow(ctx, user); d.Allowed || d.Reason != floodgate.ReasonLimit {
		t.Errorf("6th decision: %+v, want denied by the limit", d)
	}
}

// TestTLS talks to a Redis that accepts only TLS: with its certificate in
// Options.TLS decisions work (over a rediss:// URL, and over a redis:// one,
// which Options.TLS turns to TLS); a client that does not trust the
// server's certificate, or that speaks plain text, cannot connect.
func TestTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	for _, url := range []string{"rediss://" + srv.Addr + "/0", "redis://" + srv.Addr + "/0"} {
		s, err := redis.New(&redis.Options{URL: url, TLS: srv.TLS})
		if err != nil {
			t.Fatalf("%s with the CA: %v", url, err)
		}
		lim, err := floodgate.New("tls", s, []floodgate.Rule{{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour}}, patient)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if d := lim.Allow(context.Background(), nil); d.Allowed != (i < 2) || d.Reason == floodgate.ReasonStore {
				t.Errorf("%s: decision %d: %+v", url, i, d)
			}
		}
		s.Close()
		srv.MustDo("FLUSHALL")
	}
	for name, o := range map[string]*redis.Options{
		"rediss:// with the system roots": {URL: "rediss://" + srv.Addr + "/0"},
		"plain text":                      {URL: "redis://" + srv.Addr + "/0"},
	} {
		o.DialTimeout = time.Second
		if s, err := redis.New(o); err == nil {
			s.Close()
			t.Errorf("%s: connected to a TLS-only Redis", name)
		}
	}
}

// fixedCount reads the units counted in a first-hit fixed window's state
// (the hash field n, as HGET answers it).
func fixedCount(t *testing.T, v string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("fixed window count %q: %v", v, err)
	}
	return n
}

// must is the outcome of a Decide call that cannot fail.
func must(o floodgate.Outcome, err error) floodgate.Outcome {
	if err != nil {
		panic(err)
	}
	return o
}

// replicaCaughtUp reports whether master's first replica has acknowledged
// every write the master has made (INFO replication: the replica's offset
// against master_repl_offset).
func replicaCaughtUp(t *testing.T, master *redistest.Server) bool {
	info, err := master.Do("INFO", "replication")
	if err != nil {
		t.Fatal(err)
	}
	var own, replica int64 = -1, -2
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			own, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := strings.CutPrefix(line, "slave0:"); ok {
			for _, f := range strings.Split(v, ",") {
				if o, ok := strings.CutPrefix(f, "offset="); ok {
					replica, _ = strconv.ParseInt(o, 10, 64)
				}
			}
		}
	}
	return own >= 0 && replica >= own
}
