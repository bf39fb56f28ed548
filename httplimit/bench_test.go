package httplimit

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/store/memory"
)

// benchWriter is a ResponseWriter that discards the response, so the
// benchmarks measure the middleware rather than the recorder.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(code int)        { w.status = code }

var bare = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

// benchRequests are requests from 1024 clients of 16 users in 4 tenants.
func benchRequests() []*http.Request {
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		r, _ := http.NewRequest("GET", "http://example.com/items/1", nil)
		r.RemoteAddr = fmt.Sprintf("198.51.%d.%d:40000", i>>8, i&255)
		r.Header.Set("X-User", fmt.Sprintf("user-%d", i%16))
		r.Header.Set("X-Tenant", fmt.Sprintf("tenant-%d", i%4))
		reqs[i] = r
	}
	return reqs
}

func runBench(b *testing.B, h http.Handler) {
	reqs := benchRequests()
	w := &benchWriter{h: make(http.Header)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		clear(w.h)
		h.ServeHTTP(w, reqs[i&1023])
		if w.status != http.StatusNoContent {
			b.Fatalf("status %d", w.status)
		}
	}
}

func benchMiddleware(b *testing.B, rules []floodgate.Rule, attrs map[string]KeyFunc) http.Handler {
	store := memory.New(nil)
	b.Cleanup(func() { store.Close() })
	lim, err := floodgate.New("bench", store, rules, nil)
	if err != nil {
		b.Fatal(err)
	}
	m, err := New(lim, &Options{Attributes: attrs})
	if err != nil {
		b.Fatal(err)
	}
	return m.Handler(bare)
}

const huge = 1 << 40 // never reached: every request is admitted

// BenchmarkMiddleware measures what the middleware adds to a bare handler:
// compare Rules1 and Rules3 with Bare. Every request is admitted and carries
// quota headers.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("Bare", func(b *testing.B) { runBench(b, bare) })
	b.Run("Rules1", func(b *testing.B) {
		runBench(b, benchMiddleware(b, []floodgate.Rule{
			{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: huge, Window: time.Hour, Key: []string{"ip"}},
		}, map[string]KeyFunc{"ip": ClientIP(nil)}))
	})
	b.Run("Rules3", func(b *testing.B) {
		runBench(b, benchMiddleware(b, []floodgate.Rule{
			{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: huge, Window: time.Hour, Key: []string{"ip"}},
			{Name: "per-user", Algorithm: floodgate.TokenBucket, Limit: 1 << 20, Window: time.Second, Key: []string{"user"}},
			{Name: "per-tenant", Algorithm: floodgate.SlidingWindow, Limit: huge, Window: time.Minute, Key: []string{"tenant"}},
		}, map[string]KeyFunc{"ip": ClientIP(nil), "user": Header("X-User"), "tenant": Header("X-Tenant")}))
	})
	b.Run("Rules1NoHeaders", func(b *testing.B) {
		store := memory.New(nil)
		defer store.Close()
		lim, _ := floodgate.New("bench", store, []floodgate.Rule{
			{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: huge, Window: time.Hour, Key: []string{"ip"}},
		}, nil)
		m, _ := New(lim, &Options{Attributes: map[string]KeyFunc{"ip": ClientIP(nil)}, OmitQuotaHeaders: true})
		runBench(b, m.Handler(bare))
	})
}
