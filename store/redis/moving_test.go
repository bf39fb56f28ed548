package redis_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
)

// TestClusterReleaseOnMigratingSlot releases the last lease of a
// concurrency key whose slot is held migrating: the release is applied and
// both of the key's data go (the script emptied the lease set, then
// touched it again, which Redis refuses mid-script on a migrating slot:
// "Script attempted to access a non local key", the lease left held).
func TestClusterReleaseOnMigratingSlot(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	owners := slotOwners(t, cl.Nodes[0])
	st := serverStore(t, cl.Addrs(), true, nil)
	lim, err := floodgate.New("rel", guarded(t, st, time.Second, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "inflight", Algorithm: floodgate.Concurrency, Limit: 2, Window: time.Minute, Key: []string{"user"}},
	}, &floodgate.Options{FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	attrs := floodgate.Attributes{"user": "u"}
	lease := must(lim.Decide(ctx, floodgate.ModeConsume, attrs, 1))
	if !lease.Allowed {
		t.Fatalf("lease denied: %+v", lease)
	}
	key := "fg:{rel/inflight:u}:leases"
	slot, _ := strconv.Atoi(cl.Nodes[0].MustDo("CLUSTER", "KEYSLOT", key))
	var from, to *redistest.Server
	for _, n := range cl.Nodes {
		if n.Addr == owners[slot] {
			from = n
		} else {
			to = n
		}
	}
	mg := cl.BeginMigration(t, slot, from, to)
	if err := lim.Refund(ctx, lease.Ticket()); err != nil {
		t.Errorf("release on a migrating slot: %v", err)
	}
	for _, k := range []string{key, key + ":expiry"} {
		// A key the migrating source does not hold is answered ASK.
		if v, _ := from.Do("EXISTS", k); v == "1" {
			t.Errorf("%s left after the last lease's release", k)
		}
	}
	mg.Finish()
}

// TestClusterRefundOnMigratingSlot refunds a ticket, twice, and takes a
// concurrency key's first lease while their slots are held migrating with
// no key moved: every call of several keys that includes a key yet to be
// made (the refund's spent-ticket record, a new lease state) is refused
// (TRYAGAIN) for as long as the slot migrates, so the store takes them
// apart. The refund gives its unit back once, the lease is taken, and
// every key written has a TTL.
func TestClusterRefundOnMigratingSlot(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	owners := slotOwners(t, cl.Nodes[0])
	st := serverStore(t, cl.Addrs(), true, nil)
	opts := &floodgate.Options{FailurePolicy: floodgate.FailClosed}
	rate, err := floodgate.New("ref", guarded(t, st, time.Second, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Hour, Key: []string{"user"}},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	conc, err := floodgate.New("lease", guarded(t, st, time.Second, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "inflight", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"user"}},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	attrs := floodgate.Attributes{"user": "u"}
	first := must(rate.Decide(ctx, floodgate.ModeConsume, attrs, 1))
	if !first.Allowed || !rate.Allow(ctx, attrs).Allowed {
		t.Fatal("the first two decisions were not both admitted")
	}
	var migrations []*redistest.Migration
	for _, key := range []string{"{ref/r@1h:u}", "{lease/inflight:u}"} {
		slot, _ := strconv.Atoi(cl.Nodes[0].MustDo("CLUSTER", "KEYSLOT", key))
		var from, to *redistest.Server
		for _, n := range cl.Nodes {
			if n.Addr == owners[slot] {
				from = n
			} else {
				to = n
			}
		}
		migrations = append(migrations, cl.BeginMigration(t, slot, from, to))
	}
	for i := range 2 {
		if err := rate.Refund(ctx, first.Ticket()); err != nil {
			t.Errorf("refund %d on a migrating slot: %v", i+1, err)
		}
	}
	if d := rate.Allow(ctx, attrs); !d.Allowed || d.Reason != floodgate.ReasonNone {
		t.Errorf("after the refund: %+v, want admitted (one unit given back)", d)
	}
	if d := rate.Allow(ctx, attrs); d.Allowed || d.Reason != floodgate.ReasonLimit {
		t.Errorf("after the refund and one admission: %+v, want denied (the refund repeated gave nothing)", d)
	}
	lease := must(conc.Decide(ctx, floodgate.ModeConsume, attrs, 1))
	if !lease.Allowed || lease.Reason != floodgate.ReasonNone {
		t.Errorf("a new key's first lease on a migrating slot: %+v", lease.Decision)
	}
	if d := conc.Allow(ctx, attrs); d.Allowed || d.Reason != floodgate.ReasonLimit {
		t.Errorf("a second lease over the limit of 1: %+v, want denied", d)
	}
	if err := conc.Refund(ctx, lease.Ticket()); err != nil {
		t.Errorf("release on a migrating slot: %v", err)
	}
	for _, mg := range migrations {
		mg.Finish()
	}
	checkTTLs(t, cl)
}

// TestClusterMigratingToNodeWithoutLibrary refunds a ticket and takes a
// concurrency key's first lease while their slots are held migrating to a
// master that does not hold the library (a new node, one whose functions
// were flushed): the calls of one key the store makes there first (the
// refund's spent-ticket record, the lease's two keys) load it, since the
// refused calls they serve are refused before Redis looks for the
// function. The refund gives its unit back, the lease is taken, and every
// key written has a TTL.
func TestClusterMigratingToNodeWithoutLibrary(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	owners := slotOwners(t, cl.Nodes[0])
	st := serverStore(t, cl.Addrs(), true, nil)
	opts := &floodgate.Options{FailurePolicy: floodgate.FailClosed}
	rate, err := floodgate.New("bare", guarded(t, st, time.Second, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	conc, err := floodgate.New("barelease", guarded(t, st, time.Second, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "inflight", Algorithm: floodgate.Concurrency, Limit: 1, Window: time.Minute, Key: []string{"user"}},
	}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	attrs := floodgate.Attributes{"user": "u"}
	first := must(rate.Decide(ctx, floodgate.ModeConsume, attrs, 1))
	if !first.Allowed {
		t.Fatalf("first decision: %+v", first.Decision)
	}
	var migrations []*redistest.Migration
	var targets []*redistest.Server
	for _, key := range []string{"{bare/r@1h:u}", "{barelease/inflight:u}"} {
		slot, _ := strconv.Atoi(cl.Nodes[0].MustDo("CLUSTER", "KEYSLOT", key))
		var from, to *redistest.Server
		for _, n := range cl.Nodes {
			if n.Addr == owners[slot] {
				from = n
			} else if to == nil {
				to = n
			}
		}
		targets = append(targets, to)
		migrations = append(migrations, cl.BeginMigration(t, slot, from, to))
	}
	targets[0].MustDo("FUNCTION", "FLUSH")
	if err := rate.Refund(ctx, first.Ticket()); err != nil {
		t.Errorf("refund on a slot migrating to a node without the library: %v", err)
	}
	if d := rate.Allow(ctx, attrs); !d.Allowed || d.Reason != floodgate.ReasonNone {
		t.Errorf("after the refund: %+v, want admitted (its unit given back)", d)
	}
	targets[1].MustDo("FUNCTION", "FLUSH")
	lease := must(conc.Decide(ctx, floodgate.ModeConsume, attrs, 1))
	if !lease.Allowed || lease.Reason != floodgate.ReasonNone {
		t.Errorf("a new key's first lease on a slot migrating to a node without the library: %+v", lease.Decision)
	}
	if err := conc.Refund(ctx, lease.Ticket()); err != nil {
		t.Errorf("release: %v", err)
	}
	for _, mg := range migrations {
		mg.Finish()
	}
	checkTTLs(t, cl)
}

// TestLoadingNodeIsWaitedFor restarts Redis with a dump that takes about a
// second to load, under a decision: Redis answers LOADING until it has loaded, and
// the store sends the call again within its deadline, so the decision is
// answered by the rule, not by the failure policy.
func TestLoadingNodeIsWaitedFor(t *testing.T) {
	// Loading sleeps 0.5 ms a key (a test setting of Redis's), and
	// answers clients every 1 KB loaded: 2,000 keys take about a second.
	srv := redistest.Start(t, "--enable-debug-command", "yes",
		"--key-load-delay", "500", "--loading-process-events-interval-bytes", "1024")
	st := serverStore(t, []string{srv.Addr}, false, nil)
	lim, err := floodgate.New("load", guarded(t, st, 10*time.Second, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Hour},
	}, &floodgate.Options{FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if d := lim.Allow(ctx, nil); !d.Allowed {
		t.Fatalf("before the restart: %+v", d)
	}
	srv.MustDo("DEBUG", "POPULATE", "2000")
	// The dump's filler keys have no TTL: they go before the test's end
	// checks that no key lacks one.
	t.Cleanup(func() { srv.Do("EVAL", "for i = 0, 1999 do redis.call('DEL', 'key:' .. i) end", "0") })
	srv.MustDo("SAVE")
	srv.Kill()
	srv.Restart()
	_, loading := srv.Do("PING")
	start := time.Now()
	// The store's connections to the killed server are found dead only
	// when written to: a decision or two fail so (EOF), before any
	// reaches the restarted one.
	var d floodgate.Decision
	for range 4 {
		if d = lim.Allow(ctx, nil); d.Reason != floodgate.ReasonStore || !errors.Is(d.Err, io.EOF) {
			break
		}
	}
	t.Logf("answered %v after the restart; PING at the restart: %v", time.Since(start).Round(time.Millisecond), loading)
	if loading == nil || !strings.HasPrefix(loading.Error(), "LOADING") {
		t.Fatalf("Redis was not loading when the decision was made (PING: %v)", loading)
	}
	if _, err := srv.Do("PING"); err != nil {
		t.Errorf("Redis answers PING with %v once the decision is answered, want it loaded", err)
	}
	if !d.Allowed || d.Reason != floodgate.ReasonNone || d.Remaining != 8 {
		t.Errorf("the decision while Redis loads: %+v, want admitted by the rule with 8 left", d)
	}
}
