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
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/httplimit"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/store/memory"
	"github.com/go-chi/httprate"
	ulule "github.com/ulule/limiter/v3"
	"github.com/ulule/limiter/v3/drivers/middleware/stdlib"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
)

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
	return m.Handler(benchtool.Bare)
}

func ululeMiddleware(rules int) http.Handler {
	keys := []stdlib.KeyGetter{
		nil, // the default: the client IP
		func(r *http.Request) string { return r.Header.Get("X-User") },
		func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	}
	h := http.Handler(benchtool.Bare)
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
	h := http.Handler(benchtool.Bare)
	for i := rules - 1; i >= 0; i-- {
		h = httprate.Limit(never, time.Hour, httprate.WithKeyFuncs(keys[i]))(h)
	}
	return h
}

func BenchmarkMiddleware(b *testing.B) {
	b.Run("Bare", func(b *testing.B) { benchtool.RunHandler(b, benchtool.Bare) })
	for _, rules := range []int{1, 3} {
		b.Run(fmt.Sprintf("floodgate-httplimit/rules=%d", rules), func(b *testing.B) {
			benchtool.RunHandler(b, floodgateMiddleware(b, rules))
		})
		b.Run(fmt.Sprintf("ulule-stdlib/rules=%d", rules), func(b *testing.B) {
			benchtool.RunHandler(b, ululeMiddleware(rules))
		})
		b.Run(fmt.Sprintf("httprate/rules=%d", rules), func(b *testing.B) {
			benchtool.RunHandler(b, httprateMiddleware(rules))
		})
	}
}
