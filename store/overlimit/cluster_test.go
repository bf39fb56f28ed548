package overlimit_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/overlimit"
	"github.com/floodgate-go/floodgate/store/redis"
)

// TestClusterMaxAge is why MaxAge exists: on a Redis Cluster a decision
// whose keys span slots is charged slot by slot and given back when a
// slot denies, and a replica that saw a key denied in between remembers a
// denial Redis no longer holds. A flood from three replicas drives three
// rules to their limits; MaxAge later, every unit free in Redis is
// admitted on every replica. Without the cap the count of such stale
// denials is logged.
func TestClusterMaxAge(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	if stale := clusterFlood(t, cl, "capped", overlimit.DefaultMaxAge, 0); stale > 0 {
		t.Fatalf("%d stale denials MaxAge after the flood", stale)
	}
	t.Logf("without MaxAge, %d denials stayed stale", clusterFlood(t, cl, "uncapped", -1, time.Second))
}

// openCluster returns a store on cl that counts with the limiters' clock.
func openCluster(t *testing.T, cl *redistest.Cluster) store.Store {
	st, err := redis.New(&redis.Options{Cluster: cl.Addrs(), UseBatchTime: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// clusterFlood floods limiter name on three replicas, each a decorator with
// maxAge over its own store, waits wait (maxAge if 0) and returns how many
// (replica, user) pairs with units free in Redis are still denied.
func clusterFlood(t *testing.T, cl *redistest.Cluster, name string, maxAge, wait time.Duration) int {
	clock := clocktest.New(time.Now())
	rules := []floodgate.Rule{
		{Name: "user", Algorithm: floodgate.FixedWindow, Limit: 3, Window: time.Hour, Key: []string{"user"}},
		{Name: "tenant", Algorithm: floodgate.FixedWindow, Limit: 10, Window: time.Hour, Key: []string{"tenant"}},
		{Name: "global", Algorithm: floodgate.FixedWindow, Limit: 16, Window: time.Hour},
	}
	const replicas, users, requests = 3, 10, 900
	var lims, views []*floodgate.Limiter
	only := func(st store.Store) *floodgate.Limiter {
		l := newLimiter(t, name, st, clock, rules...)
		v, err := l.Only("user")
		if err != nil {
			t.Fatal(err)
		}
		lims, views = append(lims, l), append(views, v)
		return v
	}
	for range replicas {
		only(overlimit.New(openCluster(t, cl), &overlimit.Options{MaxAge: maxAge}))
	}
	truth := only(openCluster(t, cl)) // Redis's own answers
	lims = lims[:replicas]
	user := func(u int) floodgate.Attributes { return floodgate.Attributes{"user": fmt.Sprint("u", u)} }
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() {
			a := user(i % users)
			a["tenant"] = fmt.Sprint("t", i%2)
			if d := lims[i%replicas].Allow(ctx, a); d.Reason == floodgate.ReasonStore {
				t.Errorf("store failure: %v", d.Err)
			}
		})
	}
	wg.Wait()
	if wait == 0 {
		wait = maxAge
	}
	clock.Advance(wait)
	stale := 0
	for u := range users {
		for r := range replicas {
			d := views[r].Allow(ctx, user(u))
			if d.Allowed {
				continue
			}
			// A peek through the decorator would correct it: ask Redis.
			if free, err := truth.Peek(ctx, user(u), 1); err != nil {
				t.Fatal(err)
			} else if free.Allowed {
				stale++
				if maxAge > 0 {
					t.Errorf("replica %d: u%d has %d units free in Redis but is denied: %+v", r, u, free.Remaining, d)
				}
			}
		}
	}
	return stale
}
