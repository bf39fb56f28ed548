package scope_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/scope"
	"github.com/floodgate-go/floodgate/store"
)

// TestOf: a rule's state is stored under its limiter, its name and its
// window in the largest whole unit; a calendar window's under its kind; a
// concurrency rule's under its name alone.
func TestOf(t *testing.T) {
	for _, tt := range []struct {
		rule   string
		alg    store.Algorithm
		align  store.Align
		window time.Duration
		want   string
	}{
		{"second", store.FixedWindow, store.AlignFirstHit, time.Second, "test/second@1s"},
		{"ninety", store.SlidingWindow, store.AlignFirstHit, 90 * time.Second, "test/ninety@90s"},
		{"odd", store.GCRA, store.AlignFirstHit, 1500 * time.Microsecond, "test/odd@1500us"},
		{"day", store.FixedWindow, store.AlignDay, 0, "test/day@day"},
		{"month", store.FixedWindow, store.AlignMonth, 0, "test/month@month"},
		{"inflight", store.Concurrency, store.AlignFirstHit, time.Minute, "test/inflight"},
	} {
		if got := scope.Of("test", tt.rule, tt.alg, tt.align, tt.window); got != tt.want {
			t.Errorf("Of(%q) = %q, want %q", tt.rule, got, tt.want)
		}
	}
}
