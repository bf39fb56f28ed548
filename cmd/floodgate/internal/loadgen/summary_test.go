package loadgen

import (
	"strings"
	"testing"
	"time"
)

// TestSummaryLoadLine checks that the summary's load line says what bounded
// the run: a run of --requests reports its count, not the default duration
// it never reached.
func TestSummaryLoadLine(t *testing.T) {
	closed := Config{Target: HTTP, Concurrency: 2, Duration: 10 * time.Second}
	open := Config{Target: HTTP, Rate: 500, Concurrency: 256, Duration: 10 * time.Second}
	withRequests := func(c Config, n int64) Config { c.Requests = n; return c }
	for _, tc := range []struct {
		name string
		s    Summary
		want string
	}{
		{"duration", Summary{Config: closed, Requests: 9000, Elapsed: 10 * time.Second},
			"load        closed model: 2 workers, 10s\n"},
		{"requests", Summary{Config: withRequests(closed, 40), Requests: 40, Elapsed: 12 * time.Millisecond},
			"load        closed model: 2 workers, 40 requests\n"},
		{"requests cut short", Summary{Config: withRequests(closed, 1e6), Requests: 9000, Elapsed: 10*time.Second + time.Millisecond},
			"load        closed model: 2 workers, 1000000 requests, cut short by the 10s duration\n"},
		{"requests interrupted", Summary{Config: withRequests(closed, 40), Requests: 20, Elapsed: 5 * time.Millisecond},
			"load        closed model: 2 workers, 40 requests\n"},
		{"open, requests", Summary{Config: withRequests(open, 100), Requests: 100, Elapsed: 200 * time.Millisecond},
			"load        open model: 500 req/s offered, up to 256 in flight, 100 requests\n"},
	} {
		var b strings.Builder
		if err := tc.s.Format(&b); err != nil {
			t.Fatal(err)
		}
		_, line, _ := strings.Cut(b.String(), "\n")
		line, _, _ = strings.Cut(line, "\n")
		if line+"\n" != tc.want {
			t.Errorf("%s: load line %q, want %q", tc.name, line+"\n", tc.want)
		}
	}
}
