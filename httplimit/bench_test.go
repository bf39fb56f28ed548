package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
	"github.com/floodgate-go/floodgate/store/memory"
)

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
	return m.Handler(benchtool.Bare)
}

const huge = 1 << 40 // never reached: every request is admitted

// BenchmarkMiddleware measures what the middleware adds to a bare handler:
// compare Rules1 and Rules3 with Bare. Every request is admitted and carries
// quota headers.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("Bare", func(b *testing.B) { benchtool.RunHandler(b, benchtool.Bare) })
	b.Run("Rules1", func(b *testing.B) {
		benchtool.RunHandler(b, benchMiddleware(b, []floodgate.Rule{
			{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: huge, Window: time.Hour, Key: []string{"ip"}},
		}, map[string]KeyFunc{"ip": ClientIP(nil)}))
	})
	b.Run("Rules3", func(b *testing.B) {
		benchtool.RunHandler(b, benchMiddleware(b, []floodgate.Rule{
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
		benchtool.RunHandler(b, m.Handler(benchtool.Bare))
	})
}
