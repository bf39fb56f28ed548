package httplimit_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store/guard"
	"github.com/floodgate-go/floodgate/store/redis"
)

// With the Redis store and a real redis-server: requests are limited while
// it runs; once it is killed, a FailClosed limiter answers 503 and a
// FailOpen one lets requests through, neither with quota headers. (A key
// already denied stays denied from the store's local over-limit cache, so
// the second phase uses a fresh client key.)
func TestRedisStoppedUnderBothPolicies(t *testing.T) {
	srv := redistest.Start(t)
	store, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr + "/0", DialTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	rules := []floodgate.Rule{{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 2, Window: time.Minute, Key: []string{"client"}}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	serve := func(name string, policy floodgate.FailurePolicy) string {
		guarded, err := guard.New(store, &guard.Options{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		lim, err := floodgate.New(name, guarded, rules, &floodgate.Options{
			FailurePolicy: policy, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		m, err := httplimit.New(lim, &httplimit.Options{Attributes: map[string]httplimit.KeyFunc{"client": httplimit.Header("X-Client")}})
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewServer(m.Handler(handler))
		t.Cleanup(s.Close)
		return s.URL
	}
	closed, open := serve("closed", floodgate.FailClosed), serve("open", floodgate.FailOpen)
	client := "before"
	get := func(url string) *http.Response {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-Client", client)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, url := range []string{closed, open} {
		codes := []int{get(url).StatusCode, get(url).StatusCode, get(url).StatusCode}
		if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
			t.Fatalf("%s with Redis up: %v, want [200 200 429]", url, codes)
		}
	}

	srv.Kill()
	client = "after"
	for range 3 {
		resp := get(closed)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			resp.Header.Get(httplimit.HeaderRateLimit) != "" {
			t.Fatalf("fail closed, Redis down: %d, Retry-After %q, RateLimit %q", resp.StatusCode,
				resp.Header.Get("Retry-After"), resp.Header.Get(httplimit.HeaderRateLimit))
		}
		resp = get(open)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(httplimit.HeaderRateLimit) != "" {
			t.Fatalf("fail open, Redis down: %d, RateLimit %q", resp.StatusCode, resp.Header.Get(httplimit.HeaderRateLimit))
		}
	}
}
