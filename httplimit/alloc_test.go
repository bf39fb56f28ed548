package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/benchtool"
)

// TestAllocations pins what an admitted request allocates in the
// middleware, the way BenchmarkMiddleware calls it: nothing without quota
// headers (a one-rule limiter is asked with Allow), and with them the
// per-rule results (Limiter.Decide), the RateLimit value and the slice
// backing both header fields.
func TestAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items, so pooled paths allocate")
	}
	for _, tc := range []struct {
		name string
		opts Options
		want float64
	}{
		{"quota headers", Options{}, 3},
		{"no quota headers", Options{OmitQuotaHeaders: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, []floodgate.Rule{{Name: "per-ip", Algorithm: floodgate.FixedWindow, Limit: 1 << 40, Window: time.Hour, Key: []string{"ip"}}}, nil)
			tc.opts.Attributes = map[string]KeyFunc{"ip": ClientIP(nil)}
			m, err := New(f.lim, &tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			h := m.Handler(benchtool.Bare)
			req := httptest.NewRequest("GET", "/", nil)
			w := &headerWriter{h: http.Header{}}
			h.ServeHTTP(w, req) // the key exists before counting
			if got := testing.AllocsPerRun(200, func() { clear(w.h); h.ServeHTTP(w, req) }); got != tc.want {
				t.Errorf("%v allocs per request, want %v", got, tc.want)
			}
		})
	}
}

// headerWriter is a ResponseWriter that keeps one header map and discards
// the rest.
type headerWriter struct{ h http.Header }

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(int)             {}
