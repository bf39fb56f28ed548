//go:build unix

package bench

// BenchmarkMiddleware measures what rate-limit middleware adds to a bare
// net/http handler: floodgate's httplimit, ulule/limiter's stdlib
// middleware and go-chi/httprate, each with one rule (per client IP) and
// with three (per IP, per user header, per tenant header; the peers stack
// one middleware per rule, as their documentation shows). Every request is
// admitted, 1,024 client addresses in rotation, handlers called directly with
// a ResponseWriter that discards the response, so the numbers are the
// middleware's own cost. Subtract Bare for the added time.
//
// Besides wall time, each benchmark reports cpu-ns/op: the process's CPU
// time (user + system, every thread, so GC work is included) per request.
// On a shared machine wall time also counts the time other processes held
// the CPU; CPU time does not, so it is the steadier number to compare.
//
// Run: cd bench && go test -run '^$' -bench Middleware -benchmem

import (
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/go-chi/httprate"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
)

type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }

var bareHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })

func middlewareRequests() []*http.Request {
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

func runMiddleware(b *testing.B, h http.Handler) {
	reqs := middlewareRequests()
	w := &discardWriter{h: make(http.Header)}
	for _, r := range reqs { // every key exists before the timer starts
		h.ServeHTTP(w, r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuTime()
	n := 0
	for ; b.Loop(); n++ {
		clear(w.h)
		w.status = 0
		h.ServeHTTP(w, reqs[n&1023])
		if w.status != http.StatusNoContent {
			b.Fatalf("status %d", w.status)
		}
	}
	b.ReportMetric(float64(cpuTime()-start)/float64(n), "cpu-ns/op")
}

// cpuTime returns the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const never = 1 << 30 // a limit no benchmark reaches

func floodgateMiddleware(b *testing.B, rules int) http.Handler {
	store := memory.New(nil)
	b.Cleanup(func() { store.Close() })
	all := []floodgate.Rule{
		{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: never, Window: time.Hour, Key: []string{"ip"}},
		{Name: "per-user", Algorithm: floodgate.FixedWindow, Limit: never, Window: time.Hour, Key: []string{"user"}},
		{Name: "per-tenant", Algorithm: floodgate.FixedWindow, Limit: never, Window: time.Hour, Key: []string{"tenant"}},
	}
	lim, err := floodgate.New("bench", store, all[:rules], nil)
	if err != nil {
		b.Fatal(err)
	}
	m, err := httplimit.New(lim, &httplimit.Options{Attributes: map[string]httplimit.KeyFunc{
		"ip":     httplimit.ClientIP(nil),
		"user":   httplimit.Header("X-User"),
		"tenant": httplimit.Header("X-Tenant"),
	}})
	if err != nil {
		b.Fatal(err)
	}
	return m.Handler(bareHandler)
}

func ululeMiddleware(rules int) http.Handler {
	keys := []stdlib.KeyGetter{
		nil, // the default: the client IP
		func(r *http.Request) string { return r.Header.Get("X-User") },
		func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	}
	h := http.Handler(bareHandler)
	for i := rules - 1; i >= 0; i-- {
		l := ulule.New(ulmemory.NewStoreWithOptions(ulule.StoreOptions{Prefix: fmt.Sprint("r", i), CleanUpInterval: time.Minute}),
			ulule.Rate{Period: time.Hour, Limit: never})
		var opts []stdlib.Option
		if keys[i] != nil {
			opts = append(opts, stdlib.WithKeyGetter(keys[i]))
		}
		h = stdlib.NewMiddleware(l, opts...).Handler(h)
	}
	return h
}

func httprateMiddleware(rules int) http.Handler {
	keys := []httprate.KeyFunc{
		httprate.KeyByIP,
		func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil },
		func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil },
	}
	h := http.Handler(bareHandler)
	for i := rules - 1; i >= 0; i-- {
		h = httprate.Limit(never, time.Hour, httprate.WithKeyFuncs(keys[i]))(h)
	}
	return h
}

func BenchmarkMiddleware(b *testing.B) {
	b.Run("Bare", func(b *testing.B) { runMiddleware(b, bareHandler) })
	for _, rules := range []int{1, 3} {
		b.Run(fmt.Sprintf("floodgate-httplimit/rules=%d", rules), func(b *testing.B) {
			runMiddleware(b, floodgateMiddleware(b, rules))
		})
		b.Run(fmt.Sprintf("ulule-stdlib/rules=%d", rules), func(b *testing.B) {
			runMiddleware(b, ululeMiddleware(rules))
		})
		b.Run(fmt.Sprintf("httprate/rules=%d", rules), func(b *testing.B) {
			runMiddleware(b, httprateMiddleware(rules))
		})
	}
}
