package httplimit_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/redis"
)

// TestFairnessAcrossReplicas: per-tenant limiting keeps one tenant from
// starving the others. Four replicas of a service (each its own limiter on
// its own Redis client, one redis-server) sit behind httplimit; 20 tenants
// share them round-robin, each limited to 20 requests per clock-aligned
// second. 19 tenants offer 16 a second (80%), one offers 200 (10×), for
// three whole windows.
//
//   - Every well-behaved request is admitted. Tolerance zero: they are
//     sent in the first half of each window, so a request counts in the
//     next window only if held up for half a window, and the 20% headroom
//     absorbs a few that are.
//   - The abusive tenant is admitted exactly 20 in each window: each of the
//     remaining counts 19..0 is reported once per window, so no window
//     admitted a 21st.
//
// A machine loaded enough to hold requests up for half a window spreads
// them over a fourth window (or more); the checks then bound what each
// window may admit instead, and the log says so.
func TestFairnessAcrossReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	srv := redistest.Start(t)
	const (
		replicas = 4
		tenants  = 20
		limit    = 20
		good     = 16  // per window, 80%
		abusive  = 200 // per window, 10×
		windows  = 3
		window   = time.Second
	)
	rules := []floodgate.Rule{{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Align: floodgate.AlignClock,
		Limit: limit, Window: window, Key: []string{"tenant"}}}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	var urls []string
	for range replicas {
		store, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		lim, err := floodgate.New("fair", store, rules, &floodgate.Options{FailurePolicy: floodgate.FailClosed})
		if err != nil {
			t.Fatal(err)
		}
		m, err := httplimit.New(lim, &httplimit.Options{Attributes: map[string]httplimit.KeyFunc{"tenant": httplimit.Header("X-Tenant")}})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(m.Handler(ok))
		t.Cleanup(hs.Close)
		urls = append(urls, hs.URL)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 5 * time.Second}

	type outcome struct {
		tenant     int
		admitted   bool
		remaining  int
		sent, done time.Time
	}
	var mu sync.Mutex
	var got []outcome
	send := func(tenant, n int) {
		req, _ := http.NewRequest("GET", urls[n%replicas], nil)
		req.Header.Set("X-Tenant", fmt.Sprint("t", tenant))
		sent := time.Now()
		res, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		o := outcome{tenant: tenant, admitted: res.StatusCode == 200, sent: sent, done: time.Now()}
		if res.StatusCode != 200 && res.StatusCode != 429 {
			t.Errorf("tenant %d: status %d", tenant, res.StatusCode)
		}
		// RateLimit: "per-tenant";r=<remaining>;t=<seconds>
		v := res.Header.Get(httplimit.HeaderRateLimit)
		if i := strings.Index(v, ";r="); i >= 0 {
			rest := v[i+3:]
			o.remaining, _ = strconv.Atoi(rest[:strings.IndexByte(rest, ';')])
		}
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	}
	// Start 20ms into a window. The abusive tenant's requests are spread
	// over the first 900ms of each window; the well-behaved ones over the
	// first 450ms, so that one must be held up half a window (a loaded
	// machine running other tests under -race) to be counted in the next.
	start := time.Now().Truncate(window).Add(window + 20*time.Millisecond)
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	pace := func(tenant, perWindow, offset, stride int, spread time.Duration) {
		defer wg.Done()
		for w := range windows {
			for i := offset; i < perWindow; i += stride {
				at := start.Add(time.Duration(w)*window + time.Duration(i)*spread/time.Duration(perWindow))
				time.Sleep(time.Until(at))
				send(tenant, i)
			}
		}
	}
	for tenant := 1; tenant < tenants; tenant++ {
		wg.Add(1)
		go pace(tenant, good, 0, 1, 450*time.Millisecond)
	}
	const abusers = 8 // the abusive tenant's concurrent senders
	for k := range abusers {
		wg.Add(1)
		go pace(0, abusive, k, abusers, 900*time.Millisecond)
	}
	wg.Wait()

	// spanned is how many windows the requests of tenants good (or not)
	// may have been counted in: from the window of the first sent to that
	// of the last answered.
	spanned := func(good bool) int {
		var first, last time.Time
		for _, o := range got {
			if (o.tenant != 0) != good {
				continue
			}
			if first.IsZero() || o.sent.Before(first) {
				first = o.sent
			}
			if o.done.After(last) {
				last = o.done
			}
		}
		return int(last.Truncate(window).Sub(first.Truncate(window))/window) + 1
	}
	goodWindows, abusiveWindows := spanned(true), spanned(false)
	if goodWindows > windows || abusiveWindows > windows {
		t.Logf("a loaded machine: requests spread over %d windows (well-behaved) and %d (abusive), not %d; checking bounds instead of exact counts", goodWindows, abusiveWindows, windows)
	}

	admitted := make([]int, tenants)
	seen := map[int]int{} // the abusive tenant's admitted remaining counts
	for _, o := range got {
		if o.admitted {
			admitted[o.tenant]++
			if o.tenant == 0 {
				seen[o.remaining]++
			}
		}
	}
	if goodWindows == windows {
		for tenant := 1; tenant < tenants; tenant++ {
			if admitted[tenant] != good*windows {
				t.Errorf("tenant %d: %d of its %d requests admitted, want all", tenant, admitted[tenant], good*windows)
			}
		}
	}
	// Every window the abusive tenant reached admits it exactly limit
	// times, or fewer where it reached the window late or left it early.
	if admitted[0] > limit*abusiveWindows || abusiveWindows == windows && admitted[0] != limit*windows {
		t.Errorf("abusive tenant: %d admitted over %d windows, want exactly %d", admitted[0], abusiveWindows, limit*abusiveWindows)
	}
	var counts []string
	for r := range limit {
		if seen[r] > abusiveWindows || abusiveWindows == windows && seen[r] != windows {
			counts = append(counts, fmt.Sprintf("r=%d ×%d", r, seen[r]))
		}
	}
	sort.Strings(counts)
	if len(counts) > 0 {
		t.Errorf("abusive tenant: remaining counts not once per window: %v", counts)
	}
	t.Logf("%d requests; abusive tenant admitted %d of %d offered", len(got), admitted[0], abusive*windows)
}
