package httplimit_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/redistest"
	"github.com/floodgate-go/floodgate/store"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/floodgate-go/floodgate/store/redis"
)

// BenchmarkMiddlewareLatency measures the latency of one request through
// the middleware, served in process (no network between client and
// handler), and reports its p50 and p99: Bare is the handler alone, so a
// case's figure less Bare's is what the middleware adds. The rule is a
// per-tenant fixed window that always admits; Redis is a local
// redis-server on loopback. Every request goes one after another, so the
// figures are per-request latency, not throughput.
func BenchmarkMiddlewareLatency(b *testing.B) {
	rules := []floodgate.Rule{{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Align: floodgate.AlignClock,
		Limit: 1 << 40, Window: time.Minute, Key: []string{"tenant"}}}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	wrap := func(b *testing.B, store store.Store) http.Handler {
		lim, err := floodgate.New("latency", store, rules, nil)
		if err != nil {
			b.Fatal(err)
		}
		m, err := httplimit.New(lim, &httplimit.Options{Attributes: map[string]httplimit.KeyFunc{"tenant": httplimit.Header("X-Tenant")}})
		if err != nil {
			b.Fatal(err)
		}
		return m.Handler(ok)
	}
	b.Run("Bare", func(b *testing.B) { runLatency(b, ok) })
	b.Run("Memory", func(b *testing.B) {
		st := memory.New(nil)
		b.Cleanup(func() { st.Close() })
		runLatency(b, wrap(b, st))
	})
	b.Run("Redis", func(b *testing.B) {
		srv := redistest.Start(b)
		st, err := redis.New(&redis.Options{URL: "redis://" + srv.Addr})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		runLatency(b, wrap(b, st))
	})
}

func runLatency(b *testing.B, h http.Handler) {
	reqs := make([]*http.Request, 64)
	for i := range reqs {
		reqs[i] = httptest.NewRequest("GET", "/", nil)
		reqs[i].Header.Set("X-Tenant", "t"+strconv.Itoa(i))
	}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		t0 := time.Now()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		lat = append(lat, time.Since(t0))
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		b.ReportMetric(float64(lat[n/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[n*99/100].Nanoseconds()), "p99-ns")
	}
}
