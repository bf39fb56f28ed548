package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redis"
)

// TestClusterCompensationUsesItsNode gives back a denied cross-slot
// decision's charge while the master of slot 0, which holds none of its
// keys, has its breaker open: the compensation goes to the master of the
// charged key's slot and is applied (it was sent as slot 0's, and the open
// breaker refused it, leaving the unit charged).
func TestClusterCompensationUsesItsNode(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	owners := slotOwners(t, cl.Nodes[0])
	var zero *redistest.Server // the master of slot 0
	for _, n := range cl.Nodes {
		if n.Addr == owners[0] {
			zero = n
		}
	}
	slotOf := func(key string) int {
		s, err := strconv.Atoi(zero.MustDo("CLUSTER", "KEYSLOT", key))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// A user whose keys of both rules live off slot 0's master, on two
	// slots, and one whose keys both live on it.
	var user, onZero string
	for i := 0; user == "" || onZero == ""; i++ {
		u := "u" + strconv.Itoa(i)
		a, b := slotOf("{comp/a@1h:"+u+"}"), slotOf("{comp/b@1h:"+u+"}")
		if owners[a] != zero.Addr && owners[b] != zero.Addr && a != b && user == "" {
			user = u
		}
		if owners[a] == zero.Addr && owners[b] == zero.Addr && onZero == "" {
			onZero = u
		}
	}
	st := serverStore(t, cl.Addrs(), true, func(o *redis.Options) {
		o.NodeBreaker = store.BreakerOptions{Failures: 1, Cooldown: time.Minute}
	})
	lim, err := floodgate.New("comp", guarded(t, st, 300*time.Millisecond, store.BreakerOptions{}), []floodgate.Rule{
		{Name: "a", Algorithm: floodgate.FixedWindow, Limit: 1, Window: time.Hour, Key: []string{"user"}},
		{Name: "b", Algorithm: floodgate.FixedWindow, Limit: 100, Window: time.Hour, Key: []string{"user"}},
	}, &floodgate.Options{FailurePolicy: floodgate.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Open the breaker of slot 0's master: one call to it fails while it
	// hangs.
	zero.Pause()
	if d := lim.Allow(ctx, floodgate.Attributes{"user": onZero}); d.Reason != floodgate.ReasonStore {
		t.Fatalf("a decision on a hung master: %+v", d)
	}
	zero.Resume()

	attrs := floodgate.Attributes{"user": user}
	if d := lim.Allow(ctx, attrs); !d.Allowed {
		t.Fatalf("first decision: %+v", d)
	}
	if d := lim.Allow(ctx, attrs); d.Allowed || d.Reason != floodgate.ReasonLimit {
		t.Fatalf("second decision: %+v, want denied by rule a", d)
	}
	key := "fg:{comp/b@1h:" + user + "}:fixed"
	var got int64
	for _, n := range cl.Nodes {
		if v, err := n.Do("HGET", key, "n"); err == nil && v != "" {
			got = fixedCount(t, v)
		}
	}
	if got != 1 {
		t.Errorf("rule b counts %d after one admitted and one denied decision, want 1 (the denied decision's charge given back)", got)
	}
}
