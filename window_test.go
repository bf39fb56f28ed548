package floodgate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/clocktest"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
)

// bothStores opens a fresh memory store and a Redis store on a fresh
// redis-server. serverClock makes the Redis store use the server's clock
// (production) rather than the decisions' (UseBatchTime).
func bothStores(serverClock bool) []struct {
	name string
	open func(t *testing.T) store.Store
} {
	return []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"memory", func(t *testing.T) store.Store {
			s := memory.New(&memory.Options{SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		}},
		{"redis", func(t *testing.T) store.Store {
			srv := redistest.Start(t)
			s, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr, UseBatchTime: !serverClock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}},
	}
}

// TestChangedWindowStartsANewState reloads a rule from 3/second to
// 9/minute and back, as an operator changing a unit does. Each window
// counts in a state of its own: the minute admits its 9 at once (no count
// carried from the second), no more in the minute, and back at 3/second a
// key admits 3 at once rather than waiting out the minute.
func TestChangedWindowStartsANewState(t *testing.T) {
	for _, st := range bothStores(false) {
		for _, alg := range []floodgate.Algorithm{floodgate.FixedWindow, floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.GCRA} {
			t.Run(st.name+"/"+alg.String(), func(t *testing.T) {
				s := st.open(t)
				clock := clocktest.New(epoch)
				var serving *floodgate.Limiter
				reload := func(limit int64, window time.Duration) {
					t.Helper()
					l, err := floodgate.New("api", s, []floodgate.Rule{
						{Name: "r", Algorithm: alg, Limit: limit, Window: window, Key: []string{"user"}},
					}, &floodgate.Options{Clock: clock, Replaces: serving})
					if err != nil {
						t.Fatal(err)
					}
					serving = l
				}
				take := func(n int) (admitted int) {
					for range n {
						if serving.Allow(context.Background(), user("u")).Allowed {
							admitted++
						}
					}
					return admitted
				}
				reload(3, time.Second)
				if got := take(5); got != 3 {
					t.Fatalf("3/second admitted %d of 5", got)
				}
				clock.Advance(200 * time.Millisecond)
				reload(9, time.Minute)
				if got := take(12); got != 9 {
					t.Errorf("right after the switch to 9/minute, admitted %d of 12, want 9", got)
				}
				for range 8 {
					clock.Advance(250 * time.Millisecond)
					if got := take(3); got != 0 {
						t.Errorf("%v into the minute, admitted %d more", clock.Now().Sub(epoch), got)
					}
				}
				reload(3, time.Second)
				if got := take(5); got != 3 {
					t.Errorf("right after the switch back to 3/second, admitted %d of 5, want 3", got)
				}
			})
		}
	}
}

// TestChangedWindowUnderLoad switches a rule from 50/second to 150/minute
// and back while 4 callers ask as fast as they can, on the stores' own
// clocks (Redis's TIME): after the first switch the minute admits its 150
// and no more; after the switch back, the first second admits its 50.
func TestChangedWindowUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 3 s")
	}
	for _, st := range bothStores(true) {
		t.Run(st.name, func(t *testing.T) {
			s := st.open(t)
			var serving atomic.Pointer[floodgate.Limiter]
			reload := func(limit int64, window time.Duration) {
				t.Helper()
				l, err := floodgate.New("api", s, []floodgate.Rule{
					{Name: "r", Algorithm: floodgate.FixedWindow, Limit: limit, Window: window, Key: []string{"user"}, Align: floodgate.AlignClock},
				}, &floodgate.Options{Replaces: serving.Load()})
				if err != nil {
					t.Fatal(err)
				}
				serving.Store(l)
			}
			reload(50, time.Second)
			var admitted atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						d := serving.Load().Allow(context.Background(), user("hot"))
						if d.Reason == floodgate.ReasonStore {
							t.Errorf("store failure: %v", d.Err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			phase := func(d time.Duration) int64 {
				time.Sleep(d)
				return admitted.Swap(0)
			}
			phase(300 * time.Millisecond)
			// 150/minute, clock-aligned: the 1.2 s after the switch lie in
			// at most two minutes.
			reload(150, time.Minute)
			if got := phase(1200 * time.Millisecond); got < 150 || got > 300 {
				t.Errorf("after the switch to 150/minute: %d admitted in 1.2 s, want 150 (300 if a minute turned)", got)
			}
			reload(50, time.Second)
			if got := phase(1000 * time.Millisecond); got < 50 || got > 100 {
				t.Errorf("after the switch back to 50/second: %d admitted in 1 s, want 50 to 100", got)
			}
			close(stop)
			wg.Wait()
		})
	}
}
