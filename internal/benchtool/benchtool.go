// Package benchtool holds what floodgate's benchmarks share, in this module
// and in the bench/ comparison module: a cheap per-goroutine random number
// generator, the process's CPU time as a benchmark metric, and the HTTP
// requests the middleware benchmarks replay. One copy keeps the in-repo and
// the comparison benchmarks on the same workload.
package benchtool

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Rand is a splitmix64 generator: cheap, allocation-free, and meant to be
// private to one goroutine.
type Rand uint64

var seeds atomic.Uint64

// NewRand returns a generator seeded differently from every other NewRand.
func NewRand() Rand { return Rand(seeds.Add(0x5851f42d4c957f2d)) }

// Next returns the next 64 random bits.
func (r *Rand) Next() uint64 {
	*r += 0x9e3779b97f4a7c15
	z := uint64(*r)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// Intn returns a uniform number in [0, n) (Lemire's multiply-shift).
func (r *Rand) Intn(n int) int { return int((r.Next() >> 32) * uint64(n) >> 32) }

// CPU returns the CPU time (user and system, all threads) this process has
// used.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ReportCPU reports the CPU time used since start per operation (b.N), as
// cpu-ns/op; call it, or defer it, after the timed loop. On a loaded
// machine wall time includes waiting for a core; CPU time mostly does not.
func ReportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(CPU()-start)/float64(b.N), "cpu-ns/op")
	}
}

// HTTPRequests returns the middleware benchmarks' 1024 requests: 1024
// client addresses, 16 users (X-User) in 4 tenants (X-Tenant).
func HTTPRequests() []*http.Request {
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

// Discard is a ResponseWriter that keeps the status and drops the body, so
// a benchmark measures the handler rather than a recorder. Reset it
// between requests.
type Discard struct {
	H      http.Header
	Status int
}

// NewDiscard returns a Discard with an empty header.
func NewDiscard() *Discard { return &Discard{H: make(http.Header)} }

// Header returns the response header.
func (w *Discard) Header() http.Header { return w.H }

// Write drops b.
func (w *Discard) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader records the status.
func (w *Discard) WriteHeader(code int) { w.Status = code }

// Reset clears the header and the status for the next request.
func (w *Discard) Reset() {
	clear(w.H)
	w.Status = 0
}

// Bare is a handler that answers 204 and does nothing else: what the
// middleware benchmarks wrap.
var Bare = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })

// RunHandler is a middleware benchmark's timed loop: it sends every request
// of HTTPRequests through h once before the timer starts (so every key
// exists), then replays them in turn, failing on any answer but 204, and
// reports allocations and cpu-ns/op.
func RunHandler(b *testing.B, h http.Handler) {
	reqs := HTTPRequests()
	w := NewDiscard()
	for _, r := range reqs {
		w.Reset()
		h.ServeHTTP(w, r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := CPU()
	for i := 0; b.Loop(); i++ {
		w.Reset()
		h.ServeHTTP(w, reqs[i&1023])
		if w.Status != http.StatusNoContent {
			b.Fatalf("status %d, want 204", w.Status)
		}
	}
	ReportCPU(b, start)
}
