package guard_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/redis"
)

// loadResult counts a load's decisions by how they were made.
type loadResult struct {
	byRules, byPolicy atomic.Int64
}

// drive runs callers goroutines deciding on l over keys until stop closes,
// calling at each decision after with its reason.
func drive(l *floodgate.Limiter, callers int, stop <-chan struct{}, after func(floodgate.Decision)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d := l.Allow(context.Background(), user(string(rune('a'+c))+string(rune('a'+i%26))))
				after(d)
				time.Sleep(100 * time.Microsecond) // callers at a rate, not a spin

			}
		}()
	}
	return &wg
}

// TestShortStallIsNoOutage freezes a real Redis (SIGSTOP) for 86 ms
// under load (64 callers), with the guard's defaults: the decisions wait
// (the default deadline outlasts the stall) or are decided by policy, the
// breaker stays closed, and from 200 ms after Redis answers the rules make
// the decisions again (all but a machine's stray timeouts, under 1%).
// Before, a 50 ms deadline and five consecutive failures opened the
// breaker for a second of policy answers.
func TestShortStallIsNoOutage(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	g, err := guard.New(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New("stall", g, []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1_000_000, Window: time.Minute, Key: []string{"user"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res loadResult
	var resumed atomic.Int64            // UnixNano; 0 before
	var late, lateByPolicy atomic.Int64 // decisions from 200 ms after Redis answered again
	stop := make(chan struct{})
	var opened atomic.Bool
	wg := drive(l, 64, stop, func(d floodgate.Decision) {
		if g.State() != store.BreakerClosed {
			opened.Store(true)
		}
		byPolicy := d.Reason == floodgate.ReasonStore
		if byPolicy {
			res.byPolicy.Add(1)
		} else {
			res.byRules.Add(1)
		}
		if r := resumed.Load(); r != 0 && time.Now().UnixNano()-r > int64(200*time.Millisecond) {
			late.Add(1)
			if byPolicy {
				lateByPolicy.Add(1)
			}
		}
	})
	time.Sleep(300 * time.Millisecond)
	before := res.byRules.Load()
	srv.Pause()
	time.Sleep(86 * time.Millisecond)
	srv.Resume()
	resumed.Store(time.Now().UnixNano())
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d decisions by the rules (%d before the stall), %d by policy", res.byRules.Load(), before, res.byPolicy.Load())
	if before == 0 {
		t.Fatal("no decision before the stall")
	}
	if opened.Load() {
		t.Error("an 86 ms stall opened the breaker")
	}
	// A loaded machine may still time out a call now and then (the tail
	// that a deadline is for); the rules must decide all but those.
	if n, of := lateByPolicy.Load(), late.Load(); of == 0 || n*100 > of {
		t.Errorf("%d of %d decisions by policy from 200 ms after Redis answered again, want under 1%%", n, of)
	}
}

// TestOutageOpensAndRecovers freezes Redis for 1.5 s under load: the
// breaker opens (decisions stop waiting for the deadline), probes at
// growing intervals, and closes within its longest cooldown once Redis
// answers.
func TestOutageOpensAndRecovers(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	g, err := guard.New(rs, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := floodgate.New("outage", g, []floodgate.Rule{
		{Name: "r", Algorithm: floodgate.FixedWindow, Limit: 1_000_000, Window: time.Minute, Key: []string{"user"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res loadResult
	stop := make(chan struct{})
	wg := drive(l, 8, stop, func(d floodgate.Decision) {
		if d.Reason == floodgate.ReasonStore {
			res.byPolicy.Add(1)
		} else {
			res.byRules.Add(1)
		}
	})
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(200 * time.Millisecond)
	srv.Pause()
	opened := false
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		opened = opened || g.State() != store.BreakerClosed
	}
	srv.Resume()
	if !opened {
		t.Fatal("the breaker did not open in 1.5 s of outage")
	}
	back := time.Now()
	for g.State() != store.BreakerClosed {
		if time.Since(back) > 1500*time.Millisecond {
			t.Fatalf("breaker still %v 1.5 s after Redis answered again (the longest cooldown is 1 s)", g.State())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("closed %v after Redis answered again; %d decisions by policy", time.Since(back).Round(time.Millisecond), res.byPolicy.Load())
}
