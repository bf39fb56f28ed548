package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
)

// TestClusterReleaseOnMigratingSlot releases the last lease of a
// concurrency key whose slot is held migrating: the release is applied and
// both of the key's data go (the script emptied the lease set, then
// touched it again, which Redis refuses mid-script on a migrating slot:
// "Script attempted to access a non local key", the lease left held).
func TestClusterReleaseOnMigratingSlot(t *testing.T) {
	cl := redistest.StartCluster(t)
	owners := slotOwners(t, cl.Nodes[0])
	st := serverStore(t, cl.Addrs(), true, nil)
	lim, err := floodgate.New("rel", st, []floodgate.Rule{
		{Name: "inflight", Algorithm: floodgate.Concurrency, Limit: 2, Window: time.Minute, Key: []string{"user"}},
	}, &floodgate.Options{Timeout: time.Second, FailurePolicy: floodgate.FailClosed})
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
