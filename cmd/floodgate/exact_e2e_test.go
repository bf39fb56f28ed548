package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate-go/floodgate/internal/redistest"
)

// The tests in this file run floodgate serve as it is deployed: on Redis
// with the shipped defaults (the server's clock, decisions coalesced),
// several instances on one hot key, and fresh keys in concurrent bursts.

// exactLoad is how long TestHotKeyAcrossInstances sends (FLOODGATE_EXACT_LOAD
// sets it, as `make load-exact` does for a long run), over how many
// instances (FLOODGATE_EXACT_INSTANCES), and the percentage of the callers
// that send to the first instance (FLOODGATE_EXACT_FIRST; 0: callers are
// spread evenly).
func exactLoad(t *testing.T) (time.Duration, int, int) {
	d, n, first := 3*time.Second, 3, 0
	if v := os.Getenv("FLOODGATE_EXACT_FIRST"); v != "" {
		var err error
		if first, err = strconv.Atoi(v); err != nil || first < 0 || first > 100 {
			t.Fatalf("FLOODGATE_EXACT_FIRST=%q: want a percentage", v)
		}
	}
	if v := os.Getenv("FLOODGATE_EXACT_LOAD"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("FLOODGATE_EXACT_LOAD=%q: %v", v, err)
		}
	}
	if v := os.Getenv("FLOODGATE_EXACT_INSTANCES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("FLOODGATE_EXACT_INSTANCES=%q: want a whole number of at least 1", v)
		}
	}
	return d, n, first
}

// TestHotKeyAcrossInstances: instances of floodgate serve on one Redis,
// one clock-aligned fixed window on one hot key, demand far above the
// limit: no window admits more than its limit. Each admission is counted
// in the window its answer names (the one window end within the call's
// [sent, received] + reset_after_ms).
func TestHotKeyAcrossInstances(t *testing.T) {
	const (
		limit  = 50
		window = 250 * time.Millisecond
	)
	run, instances, first := exactLoad(t)
	srv := redistest.Start(t)
	cfg := fmt.Sprintf(`store:
  redis: {url: "redis://%s/0", deadline: 2s}
limiters:
  - name: hot
    failure_policy: closed
    rules:
      - {name: global, key: [tenant], algorithm: fixed_window, align: clock, limit: %d, window: %s}
`, srv.Addr, limit, window)
	var svcs []*service
	for range instances {
		svcs = append(svcs, startService(t, cfg, nil))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	type answer struct{ sent, recv, reset int64 } // ms
	var (
		mu       sync.Mutex
		admitted []answer
		total    atomic.Int64
		failed   atomic.Int64
	)
	stop := time.Now().Add(run)
	var wg sync.WaitGroup
	callers := 8 * instances
	for w := range callers {
		to := w % instances
		if first > 0 && instances > 1 {
			to = 0
			if w*100 >= first*callers {
				to = 1 + w%(instances-1)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := svcs[to].http + "/v1/check"
			for time.Now().Before(stop) {
				sent := time.Now().UnixMicro()
				resp, err := client.Post(url, "application/json", strings.NewReader(`{"limiter":"hot","attributes":{"tenant":"acme"}}`))
				if err != nil {
					t.Error(err)
					return
				}
				var d decision
				err = json.NewDecoder(resp.Body).Decode(&d)
				resp.Body.Close()
				recv := time.Now().UnixMicro()
				total.Add(1)
				switch {
				case err != nil:
					t.Error(err)
					return
				case d.Reason == "store":
					failed.Add(1)
				case d.Allowed:
					mu.Lock()
					admitted = append(admitted, answer{sent, recv, d.ResetAfterMS * 1000})
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// A window end is a multiple of the window; reset_after_ms rounds to
	// the ms, and the processes' clocks read the same machine's.
	w := window.Microseconds()
	const slack = 2000 // µs
	perWindow := map[int64]int{}
	ambiguous := 0
	for _, a := range admitted {
		lo, hi := a.sent+a.reset-slack, a.recv+a.reset+slack
		end := (lo + w - 1) / w * w
		switch {
		case end > hi:
			t.Errorf("an admission's reset names no window end: call [%d, %d] µs, reset %d µs", a.sent, a.recv, a.reset)
		case end+w <= hi:
			ambiguous++
		default:
			perWindow[end]++
		}
	}
	over, full := 0, 0
	from, to := (stop.Add(-run).UnixMicro()/w+1)*w, stop.UnixMicro()/w*w // the windows wholly in the run
	used := 0
	for end, n := range perWindow {
		if n > limit {
			over++
			t.Errorf("window ending at %d µs admitted %d, more than its limit %d", end, n, limit)
		}
		if end-w >= from && end <= to {
			full++
			used += n
		}
	}
	t.Logf("%d instances, %v: %d decisions (%.0f/s, %.1f× the limit), %d admitted over %d windows, %d by policy, %d not placed; the %d windows wholly in the run used %.1f%% of their limit",
		instances, run, total.Load(), float64(total.Load())/run.Seconds(), float64(total.Load())/run.Seconds()/(limit/window.Seconds()),
		len(admitted), len(perWindow), failed.Load(), ambiguous, full, 100*float64(used)/float64(max(1, full*limit)))
	if over > 0 {
		t.Errorf("%d of %d windows admitted over the limit", over, len(perWindow))
	}
	if ambiguous > len(admitted)/10 {
		t.Errorf("%d of %d admissions could not be placed in a window (calls longer than a window)", ambiguous, len(admitted))
	}
}

// TestFreshKeyBursts: fresh keys, each sent concurrent decisions at once
// over the HTTP and the Envoy API, so that the store decides several on
// one key in one call, leave no key behind once their windows pass (and,
// as in every test on real Redis, none without a TTL).
func TestFreshKeyBursts(t *testing.T) {
	srv := redistest.Start(t)
	dir := filepath.Join(t.TempDir(), "envoy")
	os.Mkdir(dir, 0o755)
	write(t, filepath.Join(dir, "burst.yaml"), "domain: burst\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000}\n")
	cfg := fmt.Sprintf(`store:
  redis: {url: "redis://%s/0", deadline: 2s}
limiters:
  - name: fresh
    rules:
      - {name: first-hit, key: [user], algorithm: fixed_window, limit: 1000, window: 300ms}
      - {name: clock, key: [user], algorithm: fixed_window, align: clock, limit: 1000, window: 300ms}
`, srv.Addr)
	s := startService(t, cfg, nil, "--envoy-config-dir", dir)
	rls := dialRLS(t, s.grpc)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const keys, burst = 300, 6
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for k := range keys {
		for range burst {
			wg.Add(2)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				resp, err := client.Post(s.http+"/v1/check", "application/json",
					strings.NewReader(fmt.Sprintf(`{"limiter":"fresh","attributes":{"user":"user:%d"}}`, k)))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}()
			go func() {
				defer wg.Done()
				_, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "burst",
					Descriptors: []*commonv3.RateLimitDescriptor{desc("user", fmt.Sprint("user:", k))}})
				if err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	ttls, err := srv.TTLs("*")
	if err != nil {
		t.Fatal(err)
	}
	untimed := 0
	for _, ttl := range ttls {
		if ttl < 0 {
			untimed++
		}
	}
	if untimed > 0 {
		t.Fatalf("%d of %d keys have no TTL right after the bursts", untimed, len(ttls))
	}
	time.Sleep(1100 * time.Millisecond) // the longest window, and a little
	if left, err := srv.TTLs("*"); err != nil || len(left) > 0 {
		t.Fatalf("%d keys left after their windows passed (%v)", len(left), err)
	}
	t.Logf("%d keys, %d decisions each over HTTP and gRPC: every key expired with its window", keys, burst)
}
