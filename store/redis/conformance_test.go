package redis_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/redis"
	"github.com/floodgate-go/floodgate/storetest"
)

// undeadlined runs the store's calls without the limiters' deadline: the
// suite checks what the store answers, and a loaded test machine must not
// turn slow answers into failure-policy decisions. Deadlines and the breaker
// are tested in fault_test.go.
type undeadlined struct{ *redis.Store }

func (u undeadlined) Apply(ctx context.Context, b *store.Batch) error {
	return u.Store.Apply(context.WithoutCancel(ctx), b)
}

// TestConformance runs the store conformance suite against a real Redis,
// with the limiters' fake clock passed to the scripts (UseBatchTime) so that
// answers compare exactly with the reference model. The over-limit cache is
// off: it answers denied decisions without evaluating their other rules, so
// their per-rule detail is not the model's (cache_test.go covers it).
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return undeadlined{newStore(t, srv)}
	})
}

// TestConcurrentConformance runs the concurrent part of the suite on the
// server's clock, with decisions coalesced, on a single node and on a
// Cluster.
func TestConcurrentConformance(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := redistest.Start(t)
		s := serverStore(t, []string{srv.Addr}, false, nil)
		storetest.RunConcurrent(t, s, expiry(s, []*redistest.Server{srv}))
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t)
		s := serverStore(t, cl.Addrs(), true, nil)
		storetest.RunConcurrent(t, s, expiry(s, cl.Nodes))
	})
}

// expiry reads the store's keys on its nodes.
func expiry(s *redis.Store, nodes []*redistest.Server) *storetest.Expiry {
	find := func(match string) (map[string]time.Duration, error) {
		all := map[string]time.Duration{}
		for _, n := range nodes {
			ttls, err := n.TTLs(match)
			if err != nil {
				return nil, err
			}
			maps.Copy(all, ttls)
		}
		return all, nil
	}
	return &storetest.Expiry{
		TTL: func(scope, key string, alg store.Algorithm) (time.Duration, bool, error) {
			k := s.StateKey(scope, key, alg)
			ttls, err := find(k)
			ttl, held := ttls[k]
			if held || err != nil || alg != store.FixedWindow {
				return ttl, held, err
			}
			// An aligned window's counter: the key naming the latest
			// window's start.
			ttls, err = find(k + ":*")
			latest := ""
			for w, d := range ttls {
				if len(w) > len(latest) || w > latest {
					latest, ttl, held = w, d, true
				}
			}
			return ttl, held, err
		},
		Keys: func(limiter string) (int, error) {
			ttls, err := find("*" + limiter + "*")
			return len(ttls), err
		},
	}
}
